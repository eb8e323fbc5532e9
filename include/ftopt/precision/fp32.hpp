#pragma once
/// precision::Fp32: everything in float32, no autocast, no loss scaling. The baseline.
///
///   ftopt::Trainer<ftopt::precision::Fp32> trainer;

#include <ftopt/precision/concept.hpp>

namespace ftopt::precision {

struct Fp32 {
  using axis = ftopt::axis::Precision;

  /// Nothing is alive during the forward.
  struct Scope {};

  void prepare(torch::nn::Module&) {}
  [[nodiscard]] Scope forward_scope() const { return {}; }
  torch::Tensor loss_input(torch::Tensor out) const { return out; }
  void backward(const torch::Tensor& loss) { loss.backward(); }
  void unscale(torch::optim::Optimizer&) {}
  bool step(torch::optim::Optimizer& optimizer) {
    optimizer.step();
    return true;
  }
  void update() {}
};

static_assert(Policy<Fp32>);

} // namespace ftopt::precision
