#pragma once
/// precision::Unscaled: the backward and optimizer hooks of a policy without loss scaling
/// (plain backward, every step taken). Fp32, Bf16Mixed and Bf16True inherit them.

#include <torch/optim/optimizer.h>

namespace ftopt::precision {

struct Unscaled {
  void backward(const torch::Tensor& loss) { loss.backward(); }
  void unscale(torch::optim::Optimizer&) {}
  bool step(torch::optim::Optimizer& optimizer) {
    optimizer.step();
    return true;
  }
  void update() {}
};

} // namespace ftopt::precision
