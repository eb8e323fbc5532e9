#pragma once
/// nn::shared_input_linears: several nn::Linear layers applied to one input (attention's query,
/// key and value) computed as one GEMM over their stacked weights, the input cast once under
/// autocast. Each layer keeps its own module, parameters and names; only the computation is shared.
///
///   auto [q, k, v] = ftopt::nn::shared_input_linears<3>({query.get(), key.get(), value.get()}, x);
///
/// It fuses when every layer computes its own forward (nothing attached, or a transparent
/// extension: a merged LoRA branch) or its own forward plus an additive term (nn::Extension::
/// additive: an unmerged LoRA branch, whose term is then computed from the same cast input); on
/// frozen weights whose extensions offer a low-rank term (LoRA, DoRA, VeRA without dropout),
/// nn::low_rank_linears instead: one GEMM over the merged weights for the forward and the input's
/// gradient; where every extension gives the same nn::Extension::together_key (QLora's quantized
/// bases, their branches without dropout or merged), that extension's forward_together (one GEMM
/// over the dequantized bases). With any other extension attached (int8, fake-quant, a
/// calibration observer, an adapter) or biases on some layers only, each layer runs its own
/// forward, unchanged; from one cast of the input where each would cast it first anyway (a
/// quantized base with dropout in training): one cast instead of one per layer.
///
/// Values: each output column is the same dot product the layer computes alone. Gradients: the
/// input's is one GEMM over all outputs' gradients, accumulated in float inside it; separate
/// autocast layers round each layer's share to bf16, then sum them in fp32. Under autocast the
/// additive terms' input gradients join that one in bf16 (one cast back, where separate layers
/// cast each). Measured: bench_step_parts (docs/benchmarks.md).

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <span>
#include <vector>

#include <ATen/ATen.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/low_rank_linears.hpp>

namespace ftopt::nn {

/// The process-wide switch: on by default; off runs every layer by itself (for side-by-side
/// benchmarks, and to rule the fusion out when chasing a numerical difference).
inline std::atomic<bool>& shared_input_linears_enabled() {
  static std::atomic<bool> enabled{true};
  return enabled;
}

/// The key every layer's extension gives (nn::Extension::together_key) where they all give the
/// same one and the layers have biases on all or none; null otherwise.
inline const void* together_key(std::span<LinearImpl* const> layers) {
  const auto& first = layers[0]->extension();
  const void* key = first ? first->together_key(*layers[0]) : nullptr;
  for (auto* layer : layers)
    if (!key || !layer->extension() || layer->extension()->together_key(*layer) != key ||
        layer->bias.defined() != layers[0]->bias.defined())
      return nullptr;
  return key;
}

template <std::size_t N>
std::array<at::Tensor, N> shared_input_linears(const std::array<LinearImpl*, N>& layers, const at::Tensor& x) {
  std::array<at::Tensor, N> out;
  const bool enabled = shared_input_linears_enabled().load(std::memory_order_relaxed);
  std::vector<std::int64_t> widths;
  for (auto* layer : layers) widths.push_back(layer->options.out_features());
  const auto split = [&](const at::Tensor& side_by_side) {
    const auto parts = side_by_side.split_with_sizes(widths, -1);
    std::copy(parts.begin(), parts.end(), out.begin());
    return out;
  };
  // Either way the input is cast once for every layer (and every additive term) where autocast
  // would cast it per layer.
  if (auto group = enabled ? low_rank_group(layers) : std::nullopt)
    return split(low_rank_linears(*group, autocast_input(x)));
  if (enabled && together_key(layers))
    return split(layers[0]->extension()->forward_together(layers, autocast_input(x)));
  bool fusable = enabled;
  const bool with_bias = layers[0]->bias.defined();
  for (auto* layer : layers) {
    const auto& ext = layer->extension();
    fusable = fusable && layer->bias.defined() == with_bias && (!ext || ext->transparent() || ext->additive());
  }
  if (!fusable) {
    const bool cast_once = enabled && std::ranges::all_of(layers, [](const LinearImpl* layer) {
                             return !layer->extension() || layer->extension()->casts_input_first();
                           });
    const at::Tensor input = cast_once ? autocast_input(x) : x;
    for (std::size_t i = 0; i < N; ++i) out[i] = layers[i]->forward(input);
    return out;
  }
  const at::Tensor input = autocast_input(x);
  std::vector<at::Tensor> weights, biases;
  for (auto* layer : layers) {
    weights.push_back(layer->weight);
    if (with_bias) biases.push_back(layer->bias);
  }
  const at::Tensor stacked = at::linear(input, at::cat(weights), with_bias ? at::cat(biases) : at::Tensor());
  // split_with_sizes, not narrow: its backward concatenates the outputs' gradients once, where
  // each narrow's would scatter into its own zero-filled copy of the whole width (measured 1.8x).
  const auto parts = stacked.split_with_sizes(widths, -1);
  for (std::size_t i = 0; i < N; ++i) {
    out[i] = parts[i];
    const auto& ext = layers[i]->extension();
    if (ext && ext->additive()) out[i] = out[i] + ext->added(*layers[i], input);
  }
  return out;
}

} // namespace ftopt::nn
