#pragma once
/// transformers' PreTrainedModel._init_weights for the modules its BERT and Llama models hold:
/// every nn::Linear and torch::nn::Embedding weight normal(0, std), every Linear bias 0 (the
/// norms keep the ones and zeros they are made with).

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/utils.h>

#include <ftopt/nn/linear.hpp>

namespace ftopt::detail {

inline void init_like_transformers(torch::nn::Module& root, double std) {
  torch::NoGradGuard no_grad;
  for (auto& module : root.modules(false)) {
    if (auto* l = module->as<nn::LinearImpl>()) {
      l->weight.normal_(0.0, std);
      if (l->bias.defined()) l->bias.zero_();
    } else if (auto* e = module->as<torch::nn::EmbeddingImpl>()) {
      e->weight.normal_(0.0, std);
    }
  }
}

} // namespace ftopt::detail
