#pragma once
/// reset_like_torch: the initialization torch::nn::Linear and torch::nn::Conv2d give (and
/// Python's reset_parameters): weight Kaiming-uniform with a = sqrt(5), which bounds it by
/// 1 / sqrt(fan_in), and the bias uniform in +-1 / sqrt(fan_in); fan_in is one output row's size.

#include <cmath>

#include <torch/nn/init.h>

namespace ftopt::nn::detail {

inline void reset_like_torch(at::Tensor& weight, at::Tensor& bias) {
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(weight[0].numel()));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

} // namespace ftopt::nn::detail
