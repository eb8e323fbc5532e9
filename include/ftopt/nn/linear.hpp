#pragma once
/// nn::Linear: torch::nn::Linear with an attach point for Peft and Quant policies. Same options
/// (torch::nn::LinearOptions), same parameters ("weight" [out, in], "bias" [out]), same
/// initialization (Kaiming-uniform with a = sqrt(5), bias uniform in +-1/sqrt(in)), so state
/// dicts written for torch::nn::Linear or Python's nn.Linear load unchanged.
///
///   ftopt::nn::Linear query(torch::nn::LinearOptions(64, 64));
///   auto y = query(x);

#include <cmath>
#include <string>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>
#include <torch/nn/options/linear.h>
#include <torch/nn/pimpl.h>

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

/// The buffers under `module`, by their names in it, that the extensions attached to its
/// nn::Linear layers declare constant (nn::Extension::constant_buffers).
inline std::vector<std::string> constant_buffers(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    const auto* linear = dynamic_cast<const LinearImpl*>(item.value().get());
    if (!linear || !linear->extension()) continue;
    for (const auto& name : linear->extension()->constant_buffers()) names.push_back(item.key() + "." + name);
  }
  return names;
}

} // namespace ftopt::nn
