#pragma once
/// The loss of an optimizer's step closure, as torch::optim's step() evaluates it: once, under
/// grad mode, before the update; undefined without a closure.

#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>

namespace ftopt::optim::detail {

inline torch::Tensor evaluate_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  c10::AutoGradMode enable_grad(true);
  return closure();
}

} // namespace ftopt::optim::detail
