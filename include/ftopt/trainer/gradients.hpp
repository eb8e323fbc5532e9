#pragma once
/// Clearing the trainable parameters' gradients between optimizer steps.

#include <vector>

#include <torch/types.h>

namespace ftopt::trainer {

/// Gradients set to none (PyTorch 2.x's zero_grad default): the next backward writes them fresh
/// instead of adding to zeros. A Parallel policy whose gradients alias its communication
/// buffers (parallel::Ddp with gradient_as_bucket_view) has them zeroed in place instead.
template <class Parallel>
void zero_grad(const Parallel& parallel, std::vector<torch::Tensor>& trainable) {
  if constexpr (requires { parallel.zero_grads_in_place(); }) {
    if (parallel.zero_grads_in_place()) {
      for (auto& p : trainable)
        if (p.grad().defined()) p.mutable_grad().zero_();
      return;
    }
  }
  for (auto& p : trainable) p.mutable_grad().reset();
}

} // namespace ftopt::trainer
