#pragma once
/// ftopt::optim::AdamW8bit: AdamW whose two moments are stored in 8 bits, block-wise dynamic
/// quantization as torchao's AdamW8bit and bitsandbytes' 8-bit optimizers define it (Dettmers et
/// al. 2022, "8-bit Optimizers via Block-wise Quantization"):
///   - each moment is cut into blocks of 256 values; a block keeps its absolute maximum (float32)
///     and one byte per value, the index of the nearest entry of a 256-entry map of the value over
///     that maximum (ties round up);
///   - the maps are the dynamic-exponent maps (bitsandbytes' create_dynamic_map, 7 exponent
///     bits): signed for the first moment, unsigned for the second, each holding 0 and 1;
///   - a parameter with fewer than 4096 values, or whose count is not a multiple of the block
///     size, keeps both moments in float32, as torchao does (bitsandbytes' min_8bit_size 4096).
/// A step is torchao's single_param_adam: decoupled weight decay p -= lr wd p; each moment
/// decoded, moved by lerp (m toward g by 1 - beta1, v toward g^2 by 1 - beta2) and stored again;
/// the update uses the float32 moments before they are stored: p -= lr (m / bc1) / (sqrt(v / bc2) + eps).
/// The options are AdamWOptions (amsgrad refused), so param groups, LoRA+ groups and learning-rate
/// schedules work unchanged; state saves and loads with the optimizer (torch::save, checkpoints).
/// State memory per quantized value: 2 bytes plus 8 bytes per 256 values, about 25.4% of AdamW's 8.
/// On the CPU a quantized float32 parameter steps in one fused pass (blockwise::step_cpu); elsewhere
/// the step is ATen operations (docs/optim.md).
///
///   ftopt::optim::AdamW8bit optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-3));

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/detail/optimizer_closure.hpp>
#include <ftopt/error.hpp>

namespace ftopt::optim {

namespace blockwise {

inline constexpr std::int64_t block_size = 256;
inline constexpr std::int64_t min_quantized_size = 4096;

/// The dynamic-exponent map with 7 exponent bits (bitsandbytes' create_dynamic_map, as torchao
/// copies it), sorted, float32: for each exponent i in 0..6, the midpoints of an even split of
/// [0.1, 1] into 2^i parts (signed; 2^(i+1) unsigned), times 10^(i-6), and their negatives when
/// signed; then 0 and 1. 256 values either way.
inline at::Tensor dynamic_map(bool is_signed) {
  std::vector<at::Tensor> parts;
  for (int i = 0; i < 7; ++i) {
    const std::int64_t items = (is_signed ? (std::int64_t{1} << i) : (std::int64_t{1} << (i + 1))) + 1;
    const at::Tensor bounds = at::linspace(0.1, 1.0, items, at::kFloat);
    const at::Tensor means = (bounds.slice(0, 0, items - 1) + bounds.slice(0, 1, items)) / 2.0;
    const at::Tensor scaled = means * std::pow(10.0, i - 6);
    parts.push_back(scaled);
    if (is_signed) parts.push_back(-scaled);
  }
  parts.push_back(at::zeros({1}, at::kFloat));
  parts.push_back(at::ones({1}, at::kFloat));
  return std::get<0>(at::cat(parts).sort());
}

/// One moment, quantized: codes [n] (uint8) and per-block maxima [n / block_size] (float32).
struct Quantized {
  at::Tensor codes, absmax;
};

/// x (float32, a multiple of block_size values) as codes and block maxima (clipped at 1e-12).
inline Quantized quantize(const at::Tensor& x, const at::Tensor& thresholds) {
  const at::Tensor blocks = x.reshape({-1, block_size});
  const at::Tensor absmax = blocks.abs().amax(1).clamp_min(1e-12);
  const at::Tensor scaled = (blocks / absmax.unsqueeze(1)).reshape({-1});
  // The number of thresholds at or below each value: the index of its nearest map entry.
  const at::Tensor codes = at::searchsorted(thresholds, scaled, /*out_int32=*/true, /*right=*/true);
  return {codes.to(at::kByte), absmax};
}

/// The float32 values codes and maxima stand for.
inline at::Tensor dequantize(const Quantized& q, const at::Tensor& map) {
  const at::Tensor values = map.index_select(0, q.codes.to(at::kInt)).view({-1, block_size});
  return (values * q.absmax.unsqueeze(1)).view({-1});
}

/// One map on the host, with what quantizing by hand needs: its entries, the thresholds between
/// neighbours, and per 16-bit prefix of a float (its sign, exponent and 7 mantissa bits) the
/// number of thresholds at or below the smallest float with that prefix. A value's code is then
/// that count, moved past the thresholds inside its prefix's range: the same code as
/// searchsorted's, from one table lookup and two comparisons without branches. A prefix's range
/// (2^-8 of its magnitude) holds at most one threshold (the maps' entries are at least
/// 0.9 / 128 of their decade apart); the constructor checks two suffice.
class HostMap {
public:
  explicit HostMap(bool is_signed) {
    const at::Tensor q = dynamic_map(is_signed).contiguous();
    std::copy_n(q.data_ptr<float>(), 256, entries_.begin());
    for (int i = 0; i < 255; ++i) thresholds_[i] = entries_[i] + (entries_[i + 1] - entries_[i]) * 0.5f;
    thresholds_[255] = thresholds_[256] = std::numeric_limits<float>::infinity();  // code 255 stays
    const auto below = [&](float x) {
      return static_cast<unsigned>(std::upper_bound(thresholds_.begin(), thresholds_.begin() + 255, x) -
                                   thresholds_.begin());
    };
    for (std::uint32_t prefix = 0; prefix < 65536; ++prefix) {
      // The smallest and largest floats with this prefix (the low bits clear or set, in the
      // order of the sign).
      const bool negative = (prefix & 0x8000u) != 0;
      const std::uint32_t low_bits = (prefix << 16) | (negative ? 0xFFFFu : 0u);
      const std::uint32_t high_bits = (prefix << 16) | (negative ? 0u : 0xFFFFu);
      float low, high;
      std::memcpy(&low, &low_bits, sizeof low);
      std::memcpy(&high, &high_bits, sizeof high);
      first_[prefix] = static_cast<std::uint8_t>(below(low));
      if (std::isfinite(low) && std::isfinite(high))
        ftopt::detail::check(below(high) - below(low) <= 2, "AdamW8bit: a map has more than two thresholds in a "
                                                            "16-bit float prefix's range");
    }
  }
  float value(std::uint8_t code) const { return entries_[code]; }
  c10::ArrayRef<float> entries() const { return entries_; }
  /// The 255 thresholds between neighbouring entries: torchao's rounding, up when
  /// x - down >= (up - down) / 2.
  c10::ArrayRef<float> thresholds() const { return c10::ArrayRef<float>(thresholds_.data(), 255); }
  /// The index of x's nearest entry (ties up): the number of thresholds <= x.
  std::uint8_t code(float x) const {
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    unsigned c = first_[bits >> 16];
    c += static_cast<unsigned>(x >= thresholds_[c]);
    c += static_cast<unsigned>(x >= thresholds_[c]);
    return static_cast<std::uint8_t>(c);
  }

private:
  std::array<float, 256> entries_{};
  std::array<float, 257> thresholds_{};
  std::array<std::uint8_t, 65536> first_{};
};

inline const HostMap& host_map(bool is_signed) {
  static const HostMap signed_map(true), unsigned_map(false);
  return is_signed ? signed_map : unsigned_map;
}

/// The maps and the thresholds between their neighbours as tensors, per device (built once per
/// device from the host maps), for the ATen path.
class Maps {
public:
  const at::Tensor& map(bool is_signed, const c10::Device& device) { return entry(device).map[is_signed]; }
  const at::Tensor& thresholds(bool is_signed, const c10::Device& device) {
    return entry(device).thresholds[is_signed];
  }

private:
  struct Entry {
    c10::Device device;
    std::array<at::Tensor, 2> map, thresholds;
  };
  Entry& entry(const c10::Device& device) {
    for (auto& e : entries_)
      if (e.device == device) return e;
    Entry e{device, {}, {}};
    for (bool is_signed : {false, true}) {
      const HostMap& host = host_map(is_signed);
      e.map[is_signed] = at::tensor(host.entries()).to(device);
      e.thresholds[is_signed] = at::tensor(host.thresholds()).to(device);
    }
    entries_.push_back(std::move(e));
    return entries_.back();
  }
  std::vector<Entry> entries_;
};

/// The hyperparameters of one step, as the kernel reads them.
struct StepScalars {
  float lr, decay, beta1, beta2, eps, correction1, sqrt_correction2;
};

/// ATen's lerp: a + w (b - a), computed from the nearer end.
inline float lerp(float a, float b, float w) { return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1 - w); }

/// The whole step on float32 CPU tensors in one pass, block by block on LibTorch's threads: each
/// moment decoded, moved, used for the update and coded again while the block is in cache.
/// The same arithmetic as AdamW8bit's ATen path.
inline void step_cpu(float* param, const float* grad, std::uint8_t* m_codes, float* m_absmax, std::uint8_t* v_codes,
                     float* v_absmax, std::int64_t n, const StepScalars& s) {
  const HostMap& signed_map = host_map(true);
  const HostMap& unsigned_map = host_map(false);
  // The scalars as locals: the loops write through float pointers, which could alias them.
  const float w1 = 1 - s.beta1, w2 = 1 - s.beta2, decay = s.decay, eps = s.eps, root2 = s.sqrt_correction2;
  const float step_size = -s.lr / s.correction1;
  at::parallel_for(0, n / block_size, 16, [&](std::int64_t begin, std::int64_t end) {
    std::array<float, block_size> m{}, v{};
    for (std::int64_t block = begin; block < end; ++block) {
      const std::int64_t base = block * block_size;
      const float* __restrict g = grad + base;
      float* __restrict p = param + base;
      const float m_scale = m_absmax[block], v_scale = v_absmax[block];
      for (std::int64_t i = 0; i < block_size; ++i) {
        m[i] = lerp(signed_map.value(m_codes[base + i]) * m_scale, g[i], w1);
        v[i] = lerp(unsigned_map.value(v_codes[base + i]) * v_scale, g[i] * g[i], w2);
      }
      float m_max = 0, v_max = 0;
      for (std::int64_t i = 0; i < block_size; ++i) {  // vectorizes: no lookups here
        m_max = std::max(m_max, std::abs(m[i]));
        v_max = std::max(v_max, std::abs(v[i]));
        p[i] = p[i] * decay + step_size * (m[i] / (std::sqrt(v[i]) / root2 + eps));
      }
      m_max = std::max(m_max, 1e-12f);
      v_max = std::max(v_max, 1e-12f);
      m_absmax[block] = m_max;
      v_absmax[block] = v_max;
      const float m_inverse = 1 / m_max, v_inverse = 1 / v_max;
      for (std::int64_t i = 0; i < block_size; ++i) {
        m_codes[base + i] = signed_map.code(m[i] * m_inverse);
        v_codes[base + i] = unsigned_map.code(v[i] * v_inverse);
      }
    }
  });
}

} // namespace blockwise

/// The state of one parameter: the step count, then either both moments quantized (codes and
/// block maxima) or both in float32 (small tensors).
struct AdamW8bitParamState : public torch::optim::OptimizerCloneableParamState<AdamW8bitParamState> {
  TORCH_ARG(std::int64_t, step) = 0;
  TORCH_ARG(at::Tensor, exp_avg_codes);
  TORCH_ARG(at::Tensor, exp_avg_absmax);
  TORCH_ARG(at::Tensor, exp_avg_sq_codes);
  TORCH_ARG(at::Tensor, exp_avg_sq_absmax);
  TORCH_ARG(at::Tensor, exp_avg);     ///< float32, for a parameter too small to quantize
  TORCH_ARG(at::Tensor, exp_avg_sq);  ///< float32, likewise

public:
  bool quantized() const { return exp_avg_codes().defined(); }
  /// Bytes this state holds in tensors.
  std::int64_t bytes() const {
    std::int64_t total = 0;
    for (const auto* t : {&exp_avg_codes_, &exp_avg_absmax_, &exp_avg_sq_codes_, &exp_avg_sq_absmax_, &exp_avg_,
                          &exp_avg_sq_})
      if (t->defined()) total += t->numel() * static_cast<std::int64_t>(t->element_size());
    return total;
  }

  void serialize(torch::serialize::OutputArchive& archive) const override {
    archive.write("step", at::tensor(step_));
    write(archive, "exp_avg_codes", exp_avg_codes_);
    write(archive, "exp_avg_absmax", exp_avg_absmax_);
    write(archive, "exp_avg_sq_codes", exp_avg_sq_codes_);
    write(archive, "exp_avg_sq_absmax", exp_avg_sq_absmax_);
    write(archive, "exp_avg", exp_avg_);
    write(archive, "exp_avg_sq", exp_avg_sq_);
  }
  void serialize(torch::serialize::InputArchive& archive) override {
    at::Tensor step;
    archive.read("step", step);
    step_ = step.item<std::int64_t>();
    for (auto [key, tensor] : {std::pair{"exp_avg_codes", &exp_avg_codes_}, std::pair{"exp_avg_absmax", &exp_avg_absmax_},
                               std::pair{"exp_avg_sq_codes", &exp_avg_sq_codes_},
                               std::pair{"exp_avg_sq_absmax", &exp_avg_sq_absmax_}, std::pair{"exp_avg", &exp_avg_},
                               std::pair{"exp_avg_sq", &exp_avg_sq_}})
      if (!archive.try_read(key, *tensor, /*is_buffer=*/true)) *tensor = at::Tensor();
  }

private:
  static void write(torch::serialize::OutputArchive& archive, const char* key, const at::Tensor& t) {
    if (t.defined()) archive.write(key, t, /*is_buffer=*/true);
  }
};

class AdamW8bit : public torch::optim::Optimizer {
public:
  /// How a quantized step runs on the CPU: one fused pass over the blocks (decay, both moments
  /// and the update; the default), or the same step as ATen operations (what the fused pass is
  /// tested against).
  enum class Kernel { FusedCpu, Aten };

  explicit AdamW8bit(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                     torch::optim::AdamWOptions defaults = {}, Kernel kernel = Kernel::FusedCpu)
      : Optimizer(groups, std::make_unique<torch::optim::AdamWOptions>(defaults)), kernel_(kernel) {
    check_options(defaults);
    for (const auto& group : param_groups_)
      check_options(static_cast<const torch::optim::AdamWOptions&>(group.options()));
  }
  explicit AdamW8bit(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults = {},
                     Kernel kernel = Kernel::FusedCpu)
      : AdamW8bit({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults), kernel) {}

  torch::Tensor step(LossClosure closure = nullptr) override {
    c10::NoGradGuard no_grad;
    const torch::Tensor loss = detail::evaluate_closure(closure);
    for (auto& group : param_groups_) {
      const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
      check_options(options);
      for (auto& p : group.params())
        if (p.grad().defined()) step_parameter(p, options);
    }
    return loss;
  }

  Kernel kernel() const { return kernel_; }

  /// Bytes of optimizer state held now, over every parameter.
  std::int64_t state_bytes() const {
    std::int64_t total = 0;
    for (const auto& [key, state] : state_) total += static_cast<const AdamW8bitParamState&>(*state).bytes();
    return total;
  }

  void save(torch::serialize::OutputArchive& archive) const override {
    torch::optim::serialize<AdamW8bitParamState, torch::optim::AdamWOptions>(archive, *this);
  }
  /// The state, and the groups' options (LibTorch 1.13's loader restores the state only; 2.x's
  /// both: the same result on either).
  void load(torch::serialize::InputArchive& archive) override {
    torch::optim::serialize<AdamW8bitParamState, torch::optim::AdamWOptions>(archive, *this);
    torch::serialize::InputArchive groups_archive;
    archive.read("param_groups", groups_archive);
    std::vector<std::pair<std::vector<std::string>, std::unique_ptr<torch::optim::OptimizerOptions>>> saved;
    torch::optim::detail::serialize<torch::optim::AdamWOptions>(groups_archive, saved);
    for (std::size_t i = 0; i < saved.size() && i < param_groups_.size(); ++i)
      static_cast<torch::optim::AdamWOptions&>(param_groups_[i].options()) =
          static_cast<const torch::optim::AdamWOptions&>(*saved[i].second);
  }

private:
  static void check_options(const torch::optim::AdamWOptions& options) {
    const auto [beta1, beta2] = options.betas();
    ftopt::detail::check(options.lr() >= 0, "AdamW8bit: lr must be >= 0, got ", options.lr());
    ftopt::detail::check(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
                         "AdamW8bit: betas must be in [0, 1), got (", beta1, ", ", beta2, ")");
    ftopt::detail::check(options.eps() >= 0, "AdamW8bit: eps must be >= 0, got ", options.eps());
    ftopt::detail::check(options.weight_decay() >= 0, "AdamW8bit: weight_decay must be >= 0, got ",
                         options.weight_decay());
    ftopt::detail::check(!options.amsgrad(), "AdamW8bit: amsgrad = true is not supported (ftopt keeps no 8-bit "
                                             "running maximum); use torch::optim::AdamW for AMSGrad");
  }

  AdamW8bitParamState& state_of(const at::Tensor& p) {
    const auto key = compat::optimizer_state_key(p);
    auto found = state_.find(key);
    if (found == state_.end()) {
      auto state = std::make_unique<AdamW8bitParamState>();
      const auto n = p.numel();
      const auto floats = p.options().dtype(at::kFloat);
      if (n >= blockwise::min_quantized_size && n % blockwise::block_size == 0) {
        const auto bytes = p.options().dtype(at::kByte);
        // Zero is code 127 of the signed map and code 0 of the unsigned one; a zero maximum
        // decodes to zero whatever the code.
        state->exp_avg_codes(at::zeros({n}, bytes));
        state->exp_avg_absmax(at::zeros({n / blockwise::block_size}, floats));
        state->exp_avg_sq_codes(at::zeros({n}, bytes));
        state->exp_avg_sq_absmax(at::zeros({n / blockwise::block_size}, floats));
      } else {
        state->exp_avg(at::zeros({n}, floats));
        state->exp_avg_sq(at::zeros({n}, floats));
      }
      found = state_.emplace(key, std::move(state)).first;
    }
    return static_cast<AdamW8bitParamState&>(*found->second);
  }

  void step_parameter(at::Tensor& p, const torch::optim::AdamWOptions& options) {
    ftopt::detail::check(!p.grad().is_sparse(), "AdamW8bit: sparse gradients are not supported");
    auto& state = state_of(p);
    state.step(state.step() + 1);
    const double lr = options.lr(), eps = options.eps();
    const auto [beta1, beta2] = options.betas();
    const auto step = static_cast<double>(state.step());
    const double correction1 = 1 - std::pow(beta1, step), correction2 = 1 - std::pow(beta2, step);

    // A contiguous float32 parameter is updated in place; another is updated as a float32 copy.
    const bool in_place = p.scalar_type() == at::kFloat && p.is_contiguous();
    const double decay = 1 - lr * options.weight_decay();
    if (state.quantized() && in_place && p.is_cpu() && p.grad().scalar_type() == at::kFloat &&
        p.grad().is_contiguous() && kernel_ == Kernel::FusedCpu) {
      // The fused CPU pass: decay, both moments and the update, block by block.
      blockwise::step_cpu(p.data_ptr<float>(), p.grad().data_ptr<float>(), state.exp_avg_codes().data_ptr<std::uint8_t>(),
                          state.exp_avg_absmax().data_ptr<float>(), state.exp_avg_sq_codes().data_ptr<std::uint8_t>(),
                          state.exp_avg_sq_absmax().data_ptr<float>(), p.numel(),
                          {static_cast<float>(lr), static_cast<float>(decay), static_cast<float>(beta1),
                           static_cast<float>(beta2), static_cast<float>(eps), static_cast<float>(correction1),
                           static_cast<float>(std::sqrt(correction2))});
      return;
    }
    at::Tensor param = in_place ? p.detach().view({-1}) : p.detach().to(at::kFloat).reshape({-1}).clone();
    const at::Tensor grad = p.grad().reshape({-1}).to(at::kFloat);
    if (options.weight_decay() != 0) param.mul_(decay);
    // The moments in float32: decoded from 8 bits, or the state itself for a small tensor.
    const bool quantized = state.quantized();
    const auto device = p.device();
    at::Tensor m = quantized ? blockwise::dequantize({state.exp_avg_codes(), state.exp_avg_absmax()},
                                                     maps_.map(true, device))
                             : state.exp_avg();
    at::Tensor v = quantized ? blockwise::dequantize({state.exp_avg_sq_codes(), state.exp_avg_sq_absmax()},
                                                     maps_.map(false, device))
                             : state.exp_avg_sq();
    m.lerp_(grad, 1 - beta1);
    v.lerp_(grad.square(), 1 - beta2);
    if (quantized) {
      const auto qm = blockwise::quantize(m, maps_.thresholds(true, device));
      const auto qv = blockwise::quantize(v, maps_.thresholds(false, device));
      state.exp_avg_codes().copy_(qm.codes);
      state.exp_avg_absmax().copy_(qm.absmax);
      state.exp_avg_sq_codes().copy_(qv.codes);
      state.exp_avg_sq_absmax().copy_(qv.absmax);
    }
    const at::Tensor denom = (v.sqrt() / std::sqrt(correction2)).add_(eps);
    param.addcdiv_(m, denom, -lr / correction1);
    if (!in_place) p.detach().copy_(param.view(p.sizes()));
  }

  blockwise::Maps maps_;

  Kernel kernel_ = Kernel::FusedCpu;
};

} // namespace ftopt::optim
