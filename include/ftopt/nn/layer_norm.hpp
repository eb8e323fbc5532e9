#pragma once
/// nn::LayerNorm: torch::nn::LayerNorm (same options, "weight" and "bias") that is an fp32
/// island under mixed precision: an input of another dtype (bf16 from an autocast Linear) is
/// normalized in the weight's dtype. LibTorch 1.13's CPU layer_norm rejects a bf16 input with
/// fp32 weights ("expected scalar type BFloat16 but found Float"); PyTorch's autocast runs
/// layer_norm in fp32 too. Under Bf16True the weights are bf16, and so is the computation.
///
///   ftopt::nn::LayerNorm norm(torch::nn::LayerNormOptions({64}).eps(1e-12));

#include <torch/nn/cloneable.h>
#include <torch/nn/init.h>
#include <torch/nn/options/normalization.h>
#include <torch/nn/pimpl.h>

namespace ftopt::nn {

class LayerNormImpl : public torch::nn::Cloneable<LayerNormImpl> {
public:
  explicit LayerNormImpl(torch::nn::LayerNormOptions options) : options(std::move(options)) { reset(); }

  void reset() override {
    if (options.elementwise_affine()) {
      weight = register_parameter("weight", torch::ones(options.normalized_shape()));
      bias = register_parameter("bias", torch::zeros(options.normalized_shape()));
    } else {
      weight = register_parameter("weight", {}, false);
      bias = register_parameter("bias", {}, false);
    }
  }

  at::Tensor forward(const at::Tensor& input) {
    const at::Tensor x = weight.defined() && input.scalar_type() != weight.scalar_type()
                             ? input.to(weight.scalar_type())
                             : input;
    return at::layer_norm(x, options.normalized_shape(), weight, bias, options.eps());
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "ftopt::nn::LayerNorm(" << torch::IntArrayRef(options.normalized_shape())
           << ", eps=" << options.eps() << ")";
  }

  torch::nn::LayerNormOptions options;
  at::Tensor weight;
  at::Tensor bias;
};

TORCH_MODULE(LayerNorm);

} // namespace ftopt::nn
