#pragma once
/// precision::Bf16True: Lightning's "bf16-true": weights, gradients and optimizer state all in
/// bf16, no fp32 master copy: the least memory, at the cost of precision in the updates
/// (bf16 keeps 8 significant bits, so an update smaller than 1/256 of a weight is lost;
/// docs/precision.md). Floating-point inputs are cast to bf16; the loss is computed in fp32.
///
///   ftopt::Trainer<ftopt::precision::Bf16True> trainer;

#include <ftopt/precision/concept.hpp>
#include <ftopt/precision/support/unscaled.hpp>

namespace ftopt::precision {

struct Bf16True : Unscaled {
  using axis = ftopt::axis::Precision;
  static constexpr const char* name = "bf16-true";  ///< in grids, tables and flags

  void prepare(torch::nn::Module& module) { module.to(at::kBFloat16); }
  struct Scope {};
  [[nodiscard]] Scope forward_scope() const { return {}; }
  /// Floating inputs to bf16 (integer inputs, e.g. token ids, stay as they are).
  torch::Tensor forward_input(const torch::Tensor& input) const {
    return input.is_floating_point() ? input.to(at::kBFloat16) : input;
  }
  torch::Tensor loss_input(const torch::Tensor& out) const { return out.to(at::kFloat); }
};

static_assert(Policy<Bf16True>);

} // namespace ftopt::precision
