#pragma once
/// nn::low_rank_linears: frozen nn::Linear layers that share one input, some carrying a trainable
/// low-rank term (an unmerged LoRA branch without dropout: y = W x + b + s B(A x)), computed as
/// one GEMM over the merged weights W' = W + s B A for the forward and again for the input's
/// gradient. The adapters' gradients come from the rank-r product saved in the forward:
///
///     forward    u = x A^T             y  = x W'^T + b
///     backward   dx = dy W'            dB = s dy^T u         dA = s (dy B)^T x
///
/// Layer by layer the same LoRA forward is x W^T, A x, B(s A x) and their sum, and its backward
/// two more skinny GEMMs (through B, then through A back to x) and the sum's gradient: per layer
/// this saves two rank-r GEMMs over the token dimension and two full-width elementwise passes.
///
/// A DoRA term (a magnitude m per output row; PEFT's use_dora without dropout) rescales W''s rows
/// by c = m / n, n = ||W'||_row taken as a constant (PEFT detaches it), so y = x (c W')^T + b is
/// still one GEMM. Its gradients come from G = dy^T x, the gradient W' would have:
///
///     backward   dx = dy (c W')        dm = rowsum(G * W') / n
///                dB = s (c G) A^T      dA = s B^T (c G)
///
/// one GEMM as wide as the layer instead of PEFT's three products and five full-width
/// elementwise passes (base, scaled, sum, and their gradients), in the forward and the backward.
/// A plain term whose rank is wide for its layer (in out < 2 r (in + out) multiply-adds per token,
/// e.g. VeRA's r 256 on 128-wide layers) takes its gradients from G too (c = 1), and u is not kept.
/// W' is formed in the weights' dtype (fp32 master weights) and cast once to the compute dtype
/// (the input's: bf16 under autocast), as autocast casts W alone; its rounding of the small
/// update is the rounding autocast applies to W. Measured: bench_step_parts and bench_peft
/// (docs/benchmarks.md).
///
///   std::array<ftopt::nn::LinearImpl*, 1> layer{query.get()};
///   if (auto group = ftopt::nn::low_rank_group(layer)) y = ftopt::nn::low_rank_linears(*group, ftopt::nn::autocast_input(x));
///
/// Callers (peft::LoraBranch, nn::shared_input_linears) use it only where every layer's weight is
/// frozen and its extension offers a term (nn::Extension::low_rank) or computes the layer's own
/// forward; `low_rank_linears_enabled()` switches it off for a whole process.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/linear.hpp>

namespace ftopt::nn {

/// The process-wide switch of ftopt's merged-weight kernels (this one and
/// nn::column_scaled_linear): on by default; off sends LoRA, DoRA and VeRA branches and IA3's
/// feedforward scaling back to PEFT's layer-by-layer form (for side-by-side benchmarks, and to
/// rule the kernels out when chasing a difference).
inline std::atomic<bool>& low_rank_linears_enabled() {
  static std::atomic<bool> enabled{true};
  return enabled;
}

/// The input as the layers compute with it: cast to autocast's dtype where autocast is on for
/// its device (once for several layers, where autocast would cast it per layer).
inline at::Tensor autocast_input(const at::Tensor& x) {
  const auto device = x.device().type();
  return compat::autocast_enabled(device) && x.scalar_type() == at::kFloat ? x.to(compat::autocast_dtype(device)) : x;
}

namespace detail {

/// Autocast is kept out of the kernel: it would form W + s B A in bf16, and every tensor it is
/// given is already in the dtype it computes in.
inline c10::impl::ExcludeDispatchKeyGuard no_autocast() {
  return c10::impl::ExcludeDispatchKeyGuard(
      c10::DispatchKeySet({c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA}));
}

/// The tensor as a list: itself, or nothing when undefined (layers without bias). Autograd takes
/// no undefined tensor as a custom function's input; one in a list is none.
inline at::TensorList present(const at::Tensor& t) {
  return t.defined() ? at::TensorList(t) : at::TensorList();
}

/// What the kernel's terms are, beside their tensors: term j belongs to layer term_layer[j], is
/// scaled by scalings[j], and is DoRA's with magnitude magnitudes[term_magnitude[j]] where that
/// index is not negative.
struct TermLayout {
  std::vector<double> scalings;
  std::vector<std::int64_t> term_layer, term_magnitude;
};

/// W_i + s_j B_j A_j for each layer i, a DoRA term's rows then scaled by m / n with n their norms
/// (pushed onto `norms`, one per magnitude), stacked in the weights' dtype and cast to `dtype`.
inline at::Tensor merged_weights(at::TensorList weights, at::TensorList as, at::TensorList bs,
                                 at::TensorList magnitudes, const TermLayout& layout, at::ScalarType dtype,
                                 std::vector<at::Tensor>* norms = nullptr) {
  std::vector<at::Tensor> merged(weights.begin(), weights.end());
  for (std::size_t j = 0; j < layout.term_layer.size(); ++j) {
    auto& w = merged[static_cast<std::size_t>(layout.term_layer[j])];
    w = at::addmm(w, bs[j], as[j], /*beta=*/1, /*alpha=*/layout.scalings[j]);
    if (const auto k = layout.term_magnitude[j]; k >= 0) {
      const at::Tensor n = at::linalg_vector_norm(w, 2, {1});
      w = w * (magnitudes[static_cast<std::size_t>(k)] / n).unsqueeze(1);
      if (norms) norms->push_back(n);
    }
  }
  return (merged.size() == 1 ? merged[0] : at::cat(merged)).to(dtype);
}

/// Whether a plain term of rank r on an [out, in] layer takes its gradients from the layer-wide
/// product G = g^T x (in out multiply-adds per token) rather than from u = x A^T (2 r (in + out):
/// u, then dB = s g^T u, then dA = s (g B)^T x): for ranks wide for their layer, as VeRA's are.
inline bool grads_from_full_product(std::int64_t r, std::int64_t in, std::int64_t out) {
  return in * out < 2 * r * (in + out);
}

/// The gradients of one low-rank term's A and B from its layer's output gradient g [tokens, out],
/// the input x [tokens, in], u = x A^T [tokens, r] and B [out, r], all in the compute dtype:
/// dA = s (g B)^T x and dB = s g^T u, in `param_dtype`.
inline std::pair<at::Tensor, at::Tensor> low_rank_grads(const at::Tensor& g, const at::Tensor& x, const at::Tensor& u,
                                                        const at::Tensor& b, double s, at::ScalarType param_dtype) {
  return {at::mm(at::mm(g, b).t(), x).to(param_dtype).mul_(s), at::mm(g.t(), u).to(param_dtype).mul_(s)};
}

/// G = g^T x, the gradient of the layer's merged weight, in `dtype` (the term's own).
inline at::Tensor full_product(const at::Tensor& g, const at::Tensor& x, at::ScalarType dtype) {
  return at::mm(g.t(), x).to(dtype);
}

/// dA = s B^T G and dB = s G A^T, from the gradient G of a merged weight W + s B A.
inline std::pair<at::Tensor, at::Tensor> grads_through(const at::Tensor& grad_w, const at::Tensor& a,
                                                       const at::Tensor& b, double s) {
  return {at::mm(b.t(), grad_w).mul_(s), at::mm(grad_w, a.t()).mul_(s)};
}

/// The gradients of one DoRA term's A, B and m from its layer's output gradient g [tokens, out] and
/// the input x [tokens, in] in the compute dtype, and the term's own tensors in theirs: with
/// W' = W + s B A, c = m / n and G = g^T x, dA = s B^T (c G), dB = s (c G) A^T, dm = rowsum(G W') / n.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> dora_grads(const at::Tensor& g, const at::Tensor& x,
                                                                 const at::Tensor& w, const at::Tensor& a,
                                                                 const at::Tensor& b, double s, const at::Tensor& m,
                                                                 const at::Tensor& n) {
  const at::Tensor grad_w = full_product(g, x, a.scalar_type());
  const at::Tensor dm = (grad_w * at::addmm(w, b, a, /*beta=*/1, /*alpha=*/s)).sum(1).div_(n);
  const auto [da, db] = grads_through(grad_w.mul_((m / n).unsqueeze(1)), a, b, s);
  return {da, db, dm};
}

class LowRankLinearsFunction : public torch::autograd::Function<LowRankLinearsFunction> {
public:
  using Context = torch::autograd::AutogradContext;

  /// input [*, in] in the compute dtype; bias the layers' biases stacked, or nothing; weights
  /// [out_i, in], frozen; term j is (as[j] [r_j, in], bs[j] [out, r_j]) laid out as `layout` says,
  /// magnitudes[k] [out] DoRA's. Returns the layers' outputs side by side, [*, sum out_i].
  static torch::autograd::variable_list forward(Context* ctx, const at::Tensor& input, at::TensorList biases,
                                                at::TensorList weights, at::TensorList as, at::TensorList bs,
                                                at::TensorList magnitudes, std::vector<double> scalings,
                                                std::vector<std::int64_t> term_layer,
                                                std::vector<std::int64_t> term_magnitude) {
    auto guard = no_autocast();
    const auto dtype = input.scalar_type();
    const TermLayout layout{scalings, term_layer, term_magnitude};
    std::vector<at::Tensor> norms;
    const at::Tensor w = merged_weights(weights, as, bs, magnitudes, layout, dtype, &norms);
    const at::Tensor bias = biases.empty() ? at::Tensor() : biases[0];
    const at::Tensor y = at::linear(input, w, bias.defined() ? bias.to(dtype) : bias);
    // A narrow plain term's backward needs u = x A^T and B in the compute dtype; a wide one's
    // A and B as given; a DoRA term's forms W + s B A again from the float tensors (B as given)
    // and needs m and n.
    std::vector<at::Tensor> narrow_as, saved_bs, extra;
    for (std::size_t j = 0; j < term_layer.size(); ++j) {
      const auto i = static_cast<std::size_t>(term_layer[j]);
      if (const auto k = static_cast<std::size_t>(term_magnitude[j]); term_magnitude[j] >= 0) {
        saved_bs.push_back(bs[j]);
        extra.insert(extra.end(), {weights[i], as[j], magnitudes[k], norms[k]});
      } else if (grads_from_full_product(as[j].size(0), input.size(-1), weights[i].size(0))) {
        saved_bs.push_back(bs[j]);
        extra.push_back(as[j]);
      } else {
        narrow_as.push_back(as[j]);
        saved_bs.push_back(bs[j].to(dtype));
      }
    }
    const at::Tensor u = narrow_as.empty() ? at::Tensor()
                                           : at::mm(input.reshape({-1, input.size(-1)}),
                                                    at::cat(narrow_as).to(dtype).t());  // [tokens, sum r_j]
    torch::autograd::variable_list saved{input, u, w};
    saved.insert(saved.end(), saved_bs.begin(), saved_bs.end());
    saved.insert(saved.end(), extra.begin(), extra.end());
    ctx->save_for_backward(saved);
    std::vector<std::int64_t> widths;
    for (const auto& weight : weights) widths.push_back(weight.size(0));
    ctx->saved_data["widths"] = widths;
    ctx->saved_data["scalings"] = scalings;
    ctx->saved_data["term_layer"] = term_layer;
    ctx->saved_data["term_magnitude"] = term_magnitude;
    ctx->saved_data["biases"] = static_cast<std::int64_t>(biases.size());
    ctx->saved_data["bias_dtype"] = bias.defined() ? bias.scalar_type() : dtype;
    ctx->saved_data["param_dtype"] = as[0].scalar_type();
    return {y};
  }

  static torch::autograd::variable_list backward(Context* ctx, torch::autograd::variable_list grad_outputs) {
    auto guard = no_autocast();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& u = saved[1];
    const at::Tensor& w = saved[2];
    const auto widths = ctx->saved_data["widths"].toIntVector();
    const auto scalings = ctx->saved_data["scalings"].toDoubleVector();
    const auto term_layer = ctx->saved_data["term_layer"].toIntVector();
    const auto term_magnitude = ctx->saved_data["term_magnitude"].toIntVector();
    const auto param_dtype = ctx->saved_data["param_dtype"].toScalarType();
    const std::size_t layers = widths.size(), terms = term_layer.size();
    const auto magnitudes = static_cast<std::size_t>(std::count_if(
        term_magnitude.begin(), term_magnitude.end(), [](std::int64_t k) { return k >= 0; }));
    const auto biases = static_cast<std::size_t>(ctx->saved_data["biases"].toInt());

    const at::Tensor g = grad_outputs[0].to(input.scalar_type()).reshape({-1, w.size(0)});
    const at::Tensor x = input.reshape({-1, input.size(-1)});
    // One gradient per input of forward: input, the bias (if any), weights..., as..., bs...,
    // magnitudes..., scalings, term_layer, term_magnitude.
    torch::autograd::variable_list grads(1 + biases + layers + 2 * terms + magnitudes + 3);
    if (ctx->needs_input_grad(0)) grads[0] = at::mm(g, w).view(input.sizes());
    if (biases == 1 && ctx->needs_input_grad(1)) grads[1] = g.sum(0).to(ctx->saved_data["bias_dtype"].toScalarType());
    const std::size_t first_a = 1 + biases + layers, first_m = first_a + 2 * terms;
    std::vector<std::int64_t> row(layers, 0);  // each layer's first output column
    for (std::size_t i = 1; i < layers; ++i) row[i] = row[i - 1] + widths[i - 1];
    std::int64_t rank_begin = 0;
    std::size_t extra = 3 + terms;  // where the next DoRA or wide term's own tensors are
    for (std::size_t j = 0; j < terms; ++j) {
      const auto i = static_cast<std::size_t>(term_layer[j]);
      const at::Tensor& b = saved[3 + j];  // in the compute dtype; a DoRA or wide term's as given
      const std::int64_t r = b.size(1);
      const at::Tensor g_i = g.narrow(1, row[i], widths[i]);
      if (const auto k = static_cast<std::size_t>(term_magnitude[j]); term_magnitude[j] >= 0) {
        const auto* dora = &saved[extra];  // W, A, m, n
        extra += 4;
        std::tie(grads[first_a + j], grads[first_a + terms + j], grads[first_m + k]) =
            dora_grads(g_i, x, dora[0], dora[1], b, scalings[j], dora[2], dora[3]);
      } else if (grads_from_full_product(r, x.size(1), widths[i])) {
        const at::Tensor& a = saved[extra++];
        std::tie(grads[first_a + j], grads[first_a + terms + j]) =
            grads_through(full_product(g_i, x, a.scalar_type()), a, b, scalings[j]);
      } else {
        std::tie(grads[first_a + j], grads[first_a + terms + j]) =
            low_rank_grads(g_i, x, u.narrow(1, rank_begin, r), b, scalings[j], param_dtype);
        rank_begin += r;
      }
    }
    return grads;
  }
};

} // namespace detail

/// What one low-rank GEMM over several layers needs: their weights and biases, and the terms with
/// the layer each belongs to and DoRA's magnitudes.
struct LowRankGroup {
  std::vector<at::Tensor> weights, biases, as, bs, magnitudes;
  detail::TermLayout layout;
};

/// The group `layers` form, where they can run as one low-rank GEMM: the switch on, every weight
/// frozen, every extension absent, transparent (the layer's own forward) or offering a term, at
/// least one term, and biases on all or none. nullopt otherwise.
inline std::optional<LowRankGroup> low_rank_group(std::span<LinearImpl* const> layers) {
  if (!low_rank_linears_enabled().load(std::memory_order_relaxed)) return std::nullopt;
  LowRankGroup group;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    LinearImpl& layer = *layers[i];
    if (layer.weight.requires_grad() || layer.bias.defined() != layers[0]->bias.defined()) return std::nullopt;
    const auto& ext = layer.extension();
    if (ext && !ext->transparent()) {
      const auto term = ext->low_rank(layer);
      if (!term) return std::nullopt;
      group.as.push_back(term->a);
      group.bs.push_back(term->b);
      group.layout.scalings.push_back(term->scaling);
      group.layout.term_layer.push_back(static_cast<std::int64_t>(i));
      group.layout.term_magnitude.push_back(term->magnitude.defined() ? std::ssize(group.magnitudes) : -1);
      if (term->magnitude.defined()) group.magnitudes.push_back(term->magnitude);
    }
    group.weights.push_back(layer.weight);
    if (layer.bias.defined()) group.biases.push_back(layer.bias);
  }
  if (group.layout.term_layer.empty()) return std::nullopt;
  return group;
}

/// The group's outputs side by side ([*, sum out_i]) for an input already in the compute dtype
/// (autocast_input).
inline at::Tensor low_rank_linears(const LowRankGroup& group, const at::Tensor& input) {
  const auto& biases = group.biases;
  const at::Tensor bias = biases.empty() ? at::Tensor() : biases.size() == 1 ? biases[0] : at::cat(biases);
  if (!at::GradMode::is_enabled()) {  // inference: the merged GEMM alone, no rank-r product to keep
    auto guard = detail::no_autocast();
    const auto dtype = input.scalar_type();
    return at::linear(input,
                      detail::merged_weights(group.weights, group.as, group.bs, group.magnitudes, group.layout, dtype),
                      bias.defined() ? bias.to(dtype) : bias);
  }
  // As TensorLists, so that autograd counts each tensor as an input of its own.
  return detail::LowRankLinearsFunction::apply(input, detail::present(bias), at::TensorList(group.weights),
                                               at::TensorList(group.as), at::TensorList(group.bs),
                                               at::TensorList(group.magnitudes), group.layout.scalings,
                                               group.layout.term_layer, group.layout.term_magnitude)[0];
}

/// One layer as one low-rank GEMM over its merged weight, where low_rank_group allows it (a
/// frozen layer, a term offered); nullopt otherwise.
inline std::optional<at::Tensor> low_rank_alone(LinearImpl& layer, const at::Tensor& x) {
  const std::array<LinearImpl*, 1> alone{&layer};
  if (auto group = low_rank_group(alone)) return low_rank_linears(*group, autocast_input(x));
  return std::nullopt;
}

/// The forward of a layer whose extension adds a term (an unmerged LoRA or VeRA branch): one
/// low-rank GEMM where low_rank_alone allows it, else the layer's own output plus the term.
inline at::Tensor low_rank_or_added(LinearImpl& layer, Extension<LinearImpl>& extension, const at::Tensor& x) {
  if (auto y = low_rank_alone(layer, x)) return *std::move(y);
  return layer.base_forward(x) + extension.added(layer, x);
}

} // namespace ftopt::nn
