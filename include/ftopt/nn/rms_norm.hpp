#pragma once
/// nn::RmsNorm: root-mean-square layer norm (Zhang and Sennrich 2019) as transformers'
/// LlamaRMSNorm computes it: in float32 whatever the input's dtype,
///     y = weight * (x / sqrt(mean(x^2 over the last dimension) + eps)).to(x's dtype)
/// One parameter, "weight" (ones at first), as Hugging Face names it.
///
///   ftopt::nn::RmsNorm norm(576, 1e-5);

#include <cstdint>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include <ftopt/error.hpp>

namespace ftopt::nn {

class RmsNormImpl : public torch::nn::Cloneable<RmsNormImpl> {
public:
  RmsNormImpl(std::int64_t size, double eps) : size(size), eps(eps) {
    ftopt::detail::check(size >= 1 && eps >= 0, "nn::RmsNorm: size must be >= 1 and eps >= 0, got ", size, " and ", eps);
    reset();
  }
  void reset() override { weight = register_parameter("weight", torch::ones({size})); }

  torch::Tensor forward(const torch::Tensor& x) {
    const at::Tensor x32 = x.to(at::kFloat);
    const at::Tensor normalized = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return weight * normalized.to(x.scalar_type());
  }

  std::int64_t size;
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

} // namespace ftopt::nn
