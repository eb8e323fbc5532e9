#pragma once
/// precision::Fp32: everything in float32, no autocast, no loss scaling. The baseline.
///
///   ftopt::Trainer<ftopt::precision::Fp32> trainer;

#include <ftopt/precision/concept.hpp>
#include <ftopt/precision/support/unscaled.hpp>

namespace ftopt::precision {

struct Fp32 : Unscaled {
  using axis = ftopt::axis::Precision;
  static constexpr const char* name = "fp32";  ///< in grids, tables and flags

  /// Nothing is alive during the forward.
  struct Scope {};

  void prepare(torch::nn::Module&) {}
  [[nodiscard]] Scope forward_scope() const { return {}; }
  torch::Tensor loss_input(torch::Tensor out) const { return out; }
};

static_assert(Policy<Fp32>);

} // namespace ftopt::precision
