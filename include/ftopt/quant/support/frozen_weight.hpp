#pragma once
/// Quantized storage for a frozen weight that stays frozen (QLoRA's base under float adapters,
/// peft::QLora), in two formats, and the Linear that computes with it:
///
///   quant::Int8PerChannel  one scale per output row, symmetric, as torchao's int8 weight-only
///       config and PyTorch's per-channel symmetric observer compute it:
///         s_r = max(absmax_r / 127.5, float eps),  q = clamp(round(w / s_r), -128, 127)
///       8 bits per value plus 32 per row (25.1% of float32 at 256 columns).
///   quant::Nf4  4-bit NormalFloat (Dettmers et al. 2023; bitsandbytes' and torchao's NF4): the
///       weight, flattened row-major, in blocks of `block_size` (64) values; each value the
///       nearest of the 16 NF4 levels to w / absmax_block (ties to the lower level), two codes
///       per byte, the first in the high nibble. Double quantization as torchao's to_nf4 does
///       it: the block absmaxes less their mean, in blocks of `scaler_block_size` (256), each
///       scaled by 128 / its block's largest magnitude, rounded and clamped to int8; dequantized
///       as q / factor + mean. 4 + 8/64 + 32/(64*256) bits per value: 12.9% of float32.
///
///   quant::Nf4 nf4;                               // block 64, scalers in blocks of 256
///   nf4.check(weight, "layer.0.attention.query");  // the block sizes divide it, or an error
///   quant::PackedWeight packed = nf4.quantize(weight);
///   at::Tensor w = quant::Nf4::dequantize(packed, at::kFloat);      // [out, in]
///   at::Tensor y = quant::frozen_linear<quant::Nf4>(x, packed, bias);  // dequantized again in backward
///   at::Tensor z = quant::frozen_linear<quant::Nf4>(x, packed, bias, {lora_a, lora_b, scaling});
///   at::Tensor qkv = quant::frozen_linears<quant::Nf4>(x, packs, biases, terms);  // side by side
///
/// frozen_linear keeps only the packed weight for the backward and dequantizes it again there
/// (torchtune's linear_nf4 does the same), so no float copy of the base outlives its GEMM. With a
/// LoRA term it computes as nn::low_rank_linears does, one GEMM over W + s B A; frozen_linears
/// does the same for several layers on one input, one GEMM over their stacked weights.

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/low_rank_linears.hpp>

namespace ftopt::quant {

/// A frozen weight in a quantized format: what Int8PerChannel or Nf4 store for it.
struct PackedWeight {
  at::Tensor data;     ///< Int8PerChannel: int8 [out, in]; Nf4: uint8 [numel / 2], two codes a byte
  at::Tensor scales;   ///< Int8PerChannel: float32 [out]; Nf4: int8 [numel / block_size]
  at::Tensor factors;  ///< Nf4: float32 [blocks / scaler_block_size], the scalers' own scales
  at::Tensor mean;     ///< Nf4: float32 [], the scalers' mean
  std::vector<std::int64_t> shape;
  std::int64_t block_size = 0, scaler_block_size = 0;

  /// The bytes the quantized weight occupies.
  std::int64_t bytes() const {
    std::int64_t total = 0;
    for (const auto* t : {&data, &scales, &factors, &mean})
      if (t->defined()) total += static_cast<std::int64_t>(t->nbytes());
    return total;
  }
};

struct Int8PerChannel {
  static constexpr const char* lora_name = "lora-int8";  ///< peft::QLora's name over this format

  void validate() const {}
  /// Any 2-D weight quantizes per row.
  void check(const at::Tensor& weight, const std::string& module) const {
    ftopt::detail::check(weight.dim() == 2, "quant::Int8PerChannel: the weight of '", module, "' has ",
                         weight.dim(), " dimensions; a frozen base is a Linear's [out, in] weight");
  }

  PackedWeight quantize(const at::Tensor& weight) const {
    const at::Tensor w = weight.detach().to(at::kFloat);
    const at::Tensor scale = (w.abs().amax(1) / 127.5).clamp_min(std::numeric_limits<float>::epsilon());
    return {.data = (w / scale.unsqueeze(1)).round().clamp(-128, 127).to(at::kChar),
            .scales = scale,
            .shape = w.sizes().vec()};
  }

  static at::Tensor dequantize(const PackedWeight& packed, at::ScalarType dtype) {
    return (packed.data.to(at::kFloat) * packed.scales.to(at::kFloat).unsqueeze(1)).to(dtype);
  }
};

struct Nf4 {
  static constexpr const char* lora_name = "lora-nf4";  ///< peft::QLora's name over this format
  /// The 16 levels, normalized to [-1, 1]: bitsandbytes' create_normal_map(offset = 0.9677083),
  /// quantiles of the standard normal, 8 positive and 7 negative besides 0 (float32).
  static constexpr std::array<float, 16> levels = {
      -1.0F, -0.6961928009986877F, -0.5250730514526367F, -0.39491748809814453F, -0.28444138169288635F,
      -0.18477343022823334F, -0.09105003625154495F, 0.0F, 0.07958029955625534F, 0.16093020141124725F,
      0.24611230194568634F, 0.33791524171829224F, 0.44070982933044434F, 0.5626170039176941F,
      0.7229568362236023F, 1.0F};

  std::int64_t block_size = 64;          ///< values per absmax (QLoRA's and torchao's 64)
  std::int64_t scaler_block_size = 256;  ///< absmaxes per int8 factor (torchao's 256)

  void validate() const {
    ftopt::detail::check(block_size > 0 && block_size % 2 == 0,
                         "quant::Nf4: block_size must be a positive even number, got ", block_size);
    ftopt::detail::check(scaler_block_size > 0, "quant::Nf4: scaler_block_size must be > 0, got ", scaler_block_size);
  }

  /// The weight splits into whole blocks, and its blocks into whole scaler blocks.
  void check(const at::Tensor& weight, const std::string& module) const {
    const std::int64_t n = weight.numel();
    ftopt::detail::check(n % block_size == 0, "quant::Nf4: block_size = ", block_size, " does not divide the ", n,
                         " values of '", module, "' (", weight.sizes(), "); choose a block size that divides it");
    ftopt::detail::check((n / block_size) % scaler_block_size == 0, "quant::Nf4: scaler_block_size = ",
                         scaler_block_size, " does not divide the ", n / block_size, " blocks of '", module, "' (",
                         weight.sizes(), " in blocks of ", block_size, "); choose one that divides it");
  }

  PackedWeight quantize(const at::Tensor& weight) const {
    const at::Tensor w = weight.detach().to(at::kFloat).contiguous().view({-1, block_size});
    const at::Tensor absmax = w.abs().amax(1);
    // Double quantization of the absmaxes (torchao's double_quantize_scalers).
    const at::Tensor mean = absmax.mean();
    const at::Tensor centered = (absmax - mean).view({-1, scaler_block_size});
    const at::Tensor factors = 128.0 / centered.abs().amax(1).clamp_min(tiny);
    const at::Tensor scales = (centered * factors.unsqueeze(1)).round().clamp(-128, 127).to(at::kChar).view(-1);
    // The nearest level to each value over its block's absmax (an all-zero block codes 0).
    const at::Tensor scaled = (w / absmax.clamp_min(tiny).unsqueeze(1)).view(-1);
    const at::Tensor table = level_table(scaled.device(), at::kFloat);
    at::Tensor codes = at::empty(scaled.sizes(), scaled.options().dtype(at::kByte));
    constexpr std::int64_t chunk = 1 << 18;  // [chunk, 16] distances at a time
    for (std::int64_t begin = 0; begin < scaled.numel(); begin += chunk) {
      const std::int64_t length = std::min(chunk, scaled.numel() - begin);
      codes.narrow(0, begin, length)
          .copy_((scaled.narrow(0, begin, length).unsqueeze(1) - table).abs().argmin(1));
    }
    const at::Tensor pairs = codes.view({-1, 2});
    return {.data = pairs.select(1, 0).bitwise_left_shift(4).bitwise_or(pairs.select(1, 1)).contiguous(),
            .scales = scales,
            .factors = factors,
            .mean = mean,
            .shape = weight.sizes().vec(),
            .block_size = block_size,
            .scaler_block_size = scaler_block_size};
  }

  /// The weight in `dtype`: on the CPU in float32 or bf16 one pass over the codes (each block's
  /// 16 levels scaled once, then looked up); elsewhere in ATen ops. The same values either way.
  static at::Tensor dequantize(const PackedWeight& packed, at::ScalarType dtype) {
    const at::Tensor absmax = (packed.scales.to(at::kFloat).view({-1, packed.scaler_block_size}) /
                               packed.factors.to(at::kFloat).unsqueeze(1))
                                  .view(-1) +
                              packed.mean.to(at::kFloat);
    if (packed.data.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16))
      return dequantize_cpu(packed, absmax.contiguous(), dtype);
    const at::Tensor codes = at::stack({packed.data.bitwise_right_shift(4), packed.data.bitwise_and(15)}, 1);
    const at::Tensor values = level_table(packed.data.device(), at::kFloat).index_select(0, codes.view(-1).to(at::kLong));
    return (values.view({-1, packed.block_size}) * absmax.unsqueeze(1)).view(packed.shape).to(dtype);
  }

  static at::Tensor level_table(c10::Device device, at::ScalarType dtype) {
    return at::tensor(at::ArrayRef<float>(levels.data(), levels.size()), at::kFloat).to(device, dtype);
  }

private:
  static constexpr double tiny = std::numeric_limits<float>::min();

  static at::Tensor dequantize_cpu(const PackedWeight& packed, const at::Tensor& absmax, at::ScalarType dtype) {
    const at::Tensor data = packed.data.contiguous();
    at::Tensor out = at::empty(packed.shape, data.options().dtype(dtype));
    const std::uint8_t* codes = data.data_ptr<std::uint8_t>();
    const float* scale = absmax.data_ptr<float>();
    const std::int64_t half = packed.block_size / 2;
    const auto run = [&]<class T>(T* values) {
      at::parallel_for(0, absmax.numel(), 64, [&](std::int64_t begin, std::int64_t end) {
        std::array<T, 16> table;
        for (std::int64_t b = begin; b < end; ++b) {
          for (std::size_t k = 0; k < 16; ++k) table[k] = static_cast<T>(levels[k] * scale[b]);
          const std::uint8_t* in = codes + b * half;
          T* to = values + b * 2 * half;
          for (std::int64_t i = 0; i < half; ++i) {
            to[2 * i] = table[in[i] >> 4];
            to[2 * i + 1] = table[in[i] & 15];
          }
        }
      });
    };
    if (dtype == at::kFloat) run(out.data_ptr<float>());
    else run(out.data_ptr<at::BFloat16>());
    return out;
  }
};

namespace detail {

/// deq(W) [+ s B A] in `dtype`: the low-rank term added in float32 before the one cast.
template <class Format>
at::Tensor frozen_weight(const PackedWeight& packed, const at::Tensor& a, const at::Tensor& b, double scaling,
                         at::ScalarType dtype) {
  if (!a.defined()) return Format::dequantize(packed, dtype);
  return at::addmm(Format::dequantize(packed, at::kFloat), b.to(at::kFloat), a.to(at::kFloat), 1, scaling).to(dtype);
}

/// What a group's terms are, beside their tensors: term j belongs to layer term_layer[j] and is
/// scaled by scalings[j]; a layer without a term (a merged branch) computes with deq(W) alone.
struct FrozenTerms {
  std::vector<double> scalings;
  std::vector<std::int64_t> term_layer;
};

/// The group's weights deq(W_i) [+ s_j B_j A_j], stacked in `dtype`.
template <class Format>
at::Tensor frozen_weights(std::span<const PackedWeight> packed, at::TensorList as, at::TensorList bs,
                          const FrozenTerms& terms, at::ScalarType dtype) {
  std::vector<at::Tensor> stacked;
  for (std::size_t i = 0; i < packed.size(); ++i) {
    const auto j = std::ranges::find(terms.term_layer, static_cast<std::int64_t>(i)) - terms.term_layer.begin();
    stacked.push_back(j < std::ssize(terms.term_layer)
                          ? frozen_weight<Format>(packed[i], as[j], bs[j], terms.scalings[j], dtype)
                          : Format::dequantize(packed[i], dtype));
  }
  return stacked.size() == 1 ? stacked[0] : at::cat(stacked);
}

/// y = x W'^T + b for the stacked W' of a group of packed frozen layers on one input, one GEMM;
/// W' is formed again for the input's gradient, so the graph keeps the packed weights, the input
/// and the rank-r products u_j = x A_j^T, as nn::low_rank_linears keeps them for float weights:
///     dx = dy W'      dB_j = s_j dy_i^T u_j      dA_j = s_j (dy_i B_j)^T x
/// dy_i the columns of layer i, the one term j belongs to.
template <class Format>
class FrozenLinearsFunction : public torch::autograd::Function<FrozenLinearsFunction<Format>> {
public:
  using Context = torch::autograd::AutogradContext;

  /// `bias` holds the layers' biases stacked, or nothing; as and bs the terms' A and B, laid out as
  /// scalings and term_layer say (FrozenTerms). Autograd takes no undefined tensor as an input,
  /// and an empty list is none.
  static torch::autograd::variable_list forward(Context* ctx, const at::Tensor& input, at::TensorList bias,
                                                at::TensorList as, at::TensorList bs,
                                                const std::vector<PackedWeight>& packed, std::vector<double> scalings,
                                                std::vector<std::int64_t> term_layer) {
    auto guard = nn::detail::no_autocast();
    const auto dtype = input.scalar_type();
    const FrozenTerms terms{scalings, term_layer};
    const at::Tensor w = frozen_weights<Format>(packed, as, bs, terms, dtype);
    const at::Tensor y = at::linear(input, w, bias.empty() ? at::Tensor() : bias[0].to(dtype));
    if (!as.empty()) {
      const at::Tensor u = at::mm(input.reshape({-1, input.size(-1)}), at::cat(as).to(dtype).t());  // [tokens, sum r_j]
      torch::autograd::variable_list saved{input, u};
      saved.insert(saved.end(), as.begin(), as.end());
      saved.insert(saved.end(), bs.begin(), bs.end());
      ctx->save_for_backward(saved);
    }
    // The packed tensors as lists, one entry per layer (a format has all four or the same ones).
    std::vector<std::int64_t> shapes, blocks;
    std::vector<at::Tensor> data, scales, factors, means;
    for (const auto& p : packed) {
      shapes.insert(shapes.end(), p.shape.begin(), p.shape.end());
      blocks.insert(blocks.end(), {p.block_size, p.scaler_block_size});
      data.push_back(p.data);
      scales.push_back(p.scales);
      if (p.factors.defined()) factors.push_back(p.factors);
      if (p.mean.defined()) means.push_back(p.mean);
    }
    auto& saved = ctx->saved_data;
    saved["data"] = data;
    saved["scales"] = scales;
    saved["factors"] = factors;
    saved["means"] = means;
    saved["shapes"] = shapes;
    saved["blocks"] = blocks;
    saved["scalings"] = scalings;
    saved["term_layer"] = term_layer;
    saved["input_sizes"] = input.sizes().vec();
    saved["input_dtype"] = dtype;
    saved["biases"] = static_cast<std::int64_t>(bias.size());
    saved["bias_dtype"] = bias.empty() ? dtype : bias[0].scalar_type();
    return {y};
  }

  static torch::autograd::variable_list backward(Context* ctx, torch::autograd::variable_list grad_outputs) {
    auto guard = nn::detail::no_autocast();
    auto& saved = ctx->saved_data;
    const auto dtype = saved["input_dtype"].toScalarType();
    const FrozenTerms terms{saved["scalings"].toDoubleVector(), saved["term_layer"].toIntVector()};
    const std::size_t count = terms.term_layer.size();
    const auto biases = static_cast<std::size_t>(saved["biases"].toInt());
    const auto tensors = ctx->get_saved_variables();  // input, u, as..., bs... (with terms)
    const at::TensorList as = count ? at::TensorList(tensors).slice(2, count) : at::TensorList();
    const at::TensorList bs = count ? at::TensorList(tensors).slice(2 + count, count) : at::TensorList();
    const auto data = saved["data"].toTensorVector(), scales = saved["scales"].toTensorVector(),
               factors = saved["factors"].toTensorVector(), means = saved["means"].toTensorVector();
    const auto shapes = saved["shapes"].toIntVector(), blocks = saved["blocks"].toIntVector();
    std::vector<PackedWeight> packed;
    std::vector<std::int64_t> row{0};  // each layer's first output column
    for (std::size_t i = 0; i < data.size(); ++i) {
      packed.push_back({.data = data[i],
                        .scales = scales[i],
                        .factors = factors.empty() ? at::Tensor() : factors[i],
                        .mean = means.empty() ? at::Tensor() : means[i],
                        .shape = {shapes[2 * i], shapes[2 * i + 1]},
                        .block_size = blocks[2 * i],
                        .scaler_block_size = blocks[2 * i + 1]});
      row.push_back(row.back() + shapes[2 * i]);
    }
    const at::Tensor g = grad_outputs[0].to(dtype);
    const at::Tensor flat = g.reshape({-1, g.size(-1)});
    // One gradient per input: input, the bias (if any), as..., bs..., packed, scalings, term_layer.
    torch::autograd::variable_list grads(1 + biases + 2 * count + 3);
    if (ctx->needs_input_grad(0))
      grads[0] = at::mm(flat, frozen_weights<Format>(packed, as, bs, terms, dtype))
                     .view(saved["input_sizes"].toIntVector());
    if (biases == 1 && ctx->needs_input_grad(1)) grads[1] = flat.sum(0).to(saved["bias_dtype"].toScalarType());
    if (count == 0) return grads;
    const at::Tensor x = tensors[0].reshape({-1, tensors[0].size(-1)});
    std::int64_t rank_begin = 0;
    for (std::size_t j = 0; j < count; ++j) {
      const auto i = static_cast<std::size_t>(terms.term_layer[j]);
      const std::int64_t r = as[j].size(0);
      const at::Tensor g_i = flat.narrow(1, row[i], row[i + 1] - row[i]), u_j = tensors[1].narrow(1, rank_begin, r);
      std::tie(grads[1 + biases + j], grads[1 + biases + count + j]) =
          nn::detail::low_rank_grads(g_i, x, u_j, bs[j].to(dtype), terms.scalings[j], as[j].scalar_type());
      rank_begin += r;
    }
    return grads;
  }
};

} // namespace detail

/// Packed frozen layers on one input (a ViT's query, key and value), each with a trainable
/// low-rank term or none (terms[i], a LoRA branch without dropout or a merged one), and their
/// biases stacked or none: x (deq(W_i) + s_i B_i A_i)^T + b_i side by side ([*, sum out_i]), one
/// GEMM over the stacked weights, formed again in the backward. The input in the compute dtype
/// (nn::autocast_input under autocast).
template <class Format>
at::Tensor frozen_linears(const at::Tensor& input, std::span<const PackedWeight> packed, const at::Tensor& bias,
                          std::span<const std::optional<nn::LowRankTerm>> terms) {
  std::vector<at::Tensor> as, bs;
  detail::FrozenTerms layout;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    if (!terms[i]) continue;
    as.push_back(terms[i]->a);
    bs.push_back(terms[i]->b);
    layout.scalings.push_back(terms[i]->scaling);
    layout.term_layer.push_back(static_cast<std::int64_t>(i));
  }
  return detail::FrozenLinearsFunction<Format>::apply(input, nn::detail::present(bias), at::TensorList(as),
                                                      at::TensorList(bs),
                                                      std::vector<PackedWeight>(packed.begin(), packed.end()),
                                                      layout.scalings, layout.term_layer)[0];
}

/// x W^T + b for a packed frozen W, in x's dtype (cast x with nn::autocast_input first under
/// autocast); the bias may train.
template <class Format>
at::Tensor frozen_linear(const at::Tensor& input, const PackedWeight& packed, const at::Tensor& bias) {
  const std::optional<nn::LowRankTerm> none;
  return frozen_linears<Format>(input, {&packed, 1}, bias, {&none, 1});
}

/// x (W + s B A)^T + b for a packed frozen W and a trainable low-rank term (a LoRA branch without
/// dropout): one GEMM over the merged weight, formed again in the backward.
template <class Format>
at::Tensor frozen_linear(const at::Tensor& input, const PackedWeight& packed, const at::Tensor& bias,
                         const nn::LowRankTerm& term) {
  const std::optional<nn::LowRankTerm> one = term;
  return frozen_linears<Format>(input, {&packed, 1}, bias, {&one, 1});
}

} // namespace ftopt::quant
