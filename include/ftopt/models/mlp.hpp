#pragma once
/// models::Mlp: a multi-layer perceptron, flatten -> (Linear -> ReLU -> Dropout)* -> Linear,
/// with ftopt's nn::Linear so Peft and Quant policies can attach.
/// Parameter names follow a Python `nn.Sequential` registered as `layers` ("layers.0.weight",
/// "layers.3.bias", ...), so a state dict of the same layout matches by name.
///
///   ftopt::models::Mlp model({.in = 784, .hidden = {64}, .out = 10});
///   auto logits = model->forward(images);          // images [N, 28, 28] or [N, 784]

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/pimpl.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/linear.hpp>

namespace ftopt::models {

struct MlpOptions {
  std::int64_t in = 784;
  std::vector<std::int64_t> hidden = {256};
  std::int64_t out = 10;
  double dropout = 0.0;

  void validate() const {
    ftopt::detail::check(in >= 1, "MlpOptions: in must be >= 1, got ", in);
    ftopt::detail::check(out >= 1, "MlpOptions: out must be >= 1, got ", out);
    for (std::size_t i = 0; i < hidden.size(); ++i)
      ftopt::detail::check(hidden[i] >= 1, "MlpOptions: hidden[", i, "] must be >= 1, got ", hidden[i]);
    ftopt::detail::check(dropout >= 0.0 && dropout < 1.0,
                  "MlpOptions: dropout must be in [0, 1), got ", dropout);
  }
};

class MlpImpl : public torch::nn::Module {
public:
  explicit MlpImpl(MlpOptions options = {}) : options_(std::move(options)) {
    options_.validate();
    std::int64_t width = options_.in;
    for (auto h : options_.hidden) {
      layers_->push_back(nn::Linear(width, h));
      layers_->push_back(torch::nn::ReLU());
      if (options_.dropout > 0) layers_->push_back(torch::nn::Dropout(options_.dropout));
      width = h;
    }
    layers_->push_back(nn::Linear(width, options_.out));
    register_module("layers", layers_);
  }

  torch::Tensor forward(const torch::Tensor& x) { return layers_->forward(x.flatten(1)); }

  const MlpOptions& options() const { return options_; }

private:
  MlpOptions options_;
  torch::nn::Sequential layers_;
};

/// The module handle (a torch::nn::ModuleHolder), constructible from braced options.
class Mlp : public torch::nn::ModuleHolder<MlpImpl> {
public:
  using torch::nn::ModuleHolder<MlpImpl>::ModuleHolder;
  Mlp(MlpOptions options)  // NOLINT: implicit, so `Mlp model({.hidden = {64}})` reads well
      : ModuleHolder(std::make_shared<MlpImpl>(std::move(options))) {}
};

} // namespace ftopt::models
