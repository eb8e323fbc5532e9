#pragma once
/// nn::shared_input_linears: several nn::Linear layers applied to one input (attention's query,
/// key and value) computed as one GEMM over their stacked weights, the input cast once under
/// autocast. Each layer keeps its own module, parameters and names; only the computation is shared.
///
///   auto [q, k, v] = ftopt::nn::shared_input_linears<3>({query.get(), key.get(), value.get()}, x);
///
/// Where the layers' extensions name a kind that computes them together (nn::Extension::together:
/// peft's adapter kernel, for LoRA, DoRA, VeRA and QLoRA's packed bases), that kind computes
/// them. Otherwise they fuse when every layer computes exactly its own forward (nothing attached,
/// or nn::Effect::none: a folded LoRA branch) and the layers have biases on all or none; anything
/// else (int8, fake-quant, a calibration observer, an adapter) runs layer by layer, unchanged, as
/// does an input of fewer than min_fused_rows rows (a decoding step).
/// `fuse = false` runs every layer by itself (ftopt::KernelOptions::shared_input).
///
/// Values: each output column is the same dot product the layer computes alone. Gradients: the
/// input's is one GEMM over all outputs' gradients, accumulated in float inside it; separate
/// autocast layers round each layer's share to bf16, then sum them in fp32. Measured:
/// bench_step_parts (docs/benchmarks.md).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <typeinfo>
#include <vector>

#include <ATen/ATen.h>

#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/linear.hpp>

namespace ftopt::nn {
namespace detail {

/// The kind every extension that names one names, where they agree (nn::Extension::together); null
/// where none names one or two differ.
inline const Together<LinearImpl>* common_kind(std::span<LinearImpl* const> layers) {
  const Together<LinearImpl>* kind = nullptr;
  for (const auto* layer : layers) {
    const auto* own = layer->extension() ? layer->extension()->together() : nullptr;
    if (!own) continue;
    if (kind && typeid(*own) != typeid(*kind)) return nullptr;
    kind = own;
  }
  return kind;
}

} // namespace detail

/// Inputs of fewer rows than this run layer by layer where the layers would be stacked: the stacked
/// weight is a copy, which a decoding step's one row does not pay for (bench_llm_peer's generation).
inline constexpr std::int64_t min_fused_rows = 16;

template <std::size_t N>
std::array<at::Tensor, N> shared_input_linears(const std::array<LinearImpl*, N>& layers, const at::Tensor& x,
                                               bool fuse = true) {
  std::array<at::Tensor, N> out;
  const std::span<LinearImpl* const> group(layers);
  if (fuse) {
    if (const auto* kind = detail::common_kind(group))
      if (auto outputs = kind->forward(group, x)) {
        std::copy(outputs->begin(), outputs->end(), out.begin());
        return out;
      }
  }
  const bool with_bias = layers[0]->bias.defined();
  // Stacking copies every weight: worth it where the GEMM has rows to share it over, not for the
  // few rows of a decoding step, where the copy would cost more than the GEMM.
  const bool enough_rows = x.numel() >= min_fused_rows * x.size(-1);
  const bool fusable = fuse && enough_rows && std::ranges::all_of(layers, [&](const LinearImpl* layer) {
                         return layer->bias.defined() == with_bias && layer->effect() == Effect::none;
                       });
  if (!fusable) {
    for (std::size_t i = 0; i < N; ++i) out[i] = layers[i]->forward(x);
    return out;
  }
  std::vector<at::Tensor> weights, biases;
  std::vector<std::int64_t> widths;
  for (auto* layer : layers) {
    weights.push_back(layer->weight);
    widths.push_back(layer->options.out_features());
    if (with_bias) biases.push_back(layer->bias);
  }
  const at::Tensor stacked =
      at::linear(autocast_input(x), at::cat(weights), with_bias ? at::cat(biases) : at::Tensor());
  // split_with_sizes, not narrow: its backward concatenates the outputs' gradients once, where
  // each narrow's would scatter into its own zero-filled copy of the whole width (measured 1.8x).
  const auto parts = stacked.split_with_sizes(widths, -1);
  std::copy(parts.begin(), parts.end(), out.begin());
  return out;
}

} // namespace ftopt::nn
