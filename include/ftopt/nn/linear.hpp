#pragma once
/// nn::Linear: torch::nn::Linear with an attach point for Peft and Quant policies. Same options
/// (torch::nn::LinearOptions), same parameters ("weight" [out, in], "bias" [out]), same
/// initialization (Kaiming-uniform with a = sqrt(5), bias uniform in +-1/sqrt(in)), so state
/// dicts written for torch::nn::Linear or Python's nn.Linear load unchanged.
///
///   ftopt::nn::Linear query(torch::nn::LinearOptions(64, 64));
///   auto y = query(x);

#include <cmath>
#include <torch/nn/cloneable.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>
#include <torch/nn/options/linear.h>
#include <torch/nn/pimpl.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/init.hpp>

namespace ftopt::nn {

class LinearImpl : public torch::nn::Cloneable<LinearImpl>, public Attachable<LinearImpl> {
public:
  LinearImpl(std::int64_t in_features, std::int64_t out_features)
      : LinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(torch::nn::LinearOptions options) : options(std::move(options)) { reset(); }

  void reset() override {
    weight = register_parameter("weight",
                                torch::empty({options.out_features(), options.in_features()}));
    if (options.bias()) bias = register_parameter("bias", torch::empty(options.out_features()));
    else bias = register_parameter("bias", {}, /*requires_grad=*/false);
    reset_parameters();
  }

  /// torch::nn::Linear's initialization (and Python's nn.Linear.reset_parameters).
  void reset_parameters() { detail::reset_like_torch(weight, bias); }

  at::Tensor forward(const at::Tensor& input) {
    if (extension_) [[unlikely]] return extension_->forward(*this, input);
    return base_forward(input);
  }

  /// The layer's own computation, whatever is attached.
  at::Tensor base_forward(const at::Tensor& input) { return at::linear(input, weight, bias); }

  void pretty_print(std::ostream& stream) const override {
    stream << "ftopt::nn::Linear(in_features=" << options.in_features()
           << ", out_features=" << options.out_features() << ", bias=" << std::boolalpha
           << options.bias() << (extension_ ? ", extended" : "") << ")";
  }

  torch::nn::LinearOptions options;
  at::Tensor weight;
  at::Tensor bias;
};

TORCH_MODULE(Linear);

/// The input as nn::Linear layers compute with it: cast to autocast's dtype where autocast is on
/// for its device (once for several layers or kernels, where autocast would cast it for each).
inline at::Tensor autocast_input(const at::Tensor& x) {
  const auto device = x.device().type();
  return compat::autocast_enabled(device) && x.scalar_type() == at::kFloat ? x.to(compat::autocast_dtype(device)) : x;
}

} // namespace ftopt::nn
