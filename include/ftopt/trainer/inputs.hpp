#pragma once
/// What a batch's tensors become before the forward: on the Trainer's device (moved
/// non-blocking, left alone when already there), the input cast as the precision policy asks
/// (precision::Bf16True's forward_input); and the device a Trainer picks when the options name
/// none.

#include <utility>

#include <torch/cuda.h>
#include <torch/types.h>

#include <ftopt/detail/compat.hpp>

namespace ftopt::trainer {

/// CUDA where LibTorch sees a device, else the CPU.
inline torch::Device default_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

inline torch::Tensor on_device(const torch::Tensor& t, const torch::Device& device) {
  return t.device() == device ? t : t.to(device, /*non_blocking=*/true);
}

/// The input as the precision policy wants it; unchanged for a policy without forward_input.
template <class Precision>
torch::Tensor policy_input(const Precision& precision, const torch::Tensor& input) {
  if constexpr (requires { precision.forward_input(input); }) return precision.forward_input(input);
  else return input;
}

/// The model's output and its loss: `forward()` inside the precision policy's scope, and
/// `loss(precision.loss_input(output))` inside it too on LibTorch 2.x, after it on 1.13
/// (compat::loss_in_autocast). Training and evaluation both compute them this way.
template <class Precision, class Forward, class Loss>
std::pair<torch::Tensor, torch::Tensor> output_and_loss(const Precision& precision, Forward&& forward, Loss&& loss) {
  torch::Tensor output, value;
  {
    [[maybe_unused]] auto scope = precision.forward_scope();
    output = forward();
    if constexpr (compat::loss_in_autocast) value = loss(precision.loss_input(output));
  }
  if constexpr (!compat::loss_in_autocast) value = loss(precision.loss_input(output));
  return {std::move(output), std::move(value)};
}

} // namespace ftopt::trainer
