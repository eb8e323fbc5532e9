#pragma once
/// peft::Prefix: prefix tuning (Li & Liang 2021) with PEFT's PrefixTuningConfig names: every
/// attention layer gets `num_virtual_tokens` trainable key and value rows that all queries
/// attend to; the model's own weights freeze. PEFT's PrefixEncoder makes them: an embedding of
/// [num_virtual_tokens, layers * 2 * hidden], or with `prefix_projection` the reparameterization
/// of the paper, embedding [tokens, hidden] -> Linear -> tanh -> Linear to layers * 2 * hidden.
/// The encoder is registered on the model as "prefix_encoder". A model whose attention does not
/// take prefixes (no `has_prefix_attention`, e.g. an MLP or a ResNet) does not compile.
///
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Prefix> trainer(
///       {}, {}, ftopt::peft::Prefix({.num_virtual_tokens = 10, .prefix_projection = true}));

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/attention_prefix.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/concept.hpp>
#include <ftopt/peft/full.hpp>

namespace ftopt::peft {

struct PrefixOptions {
  std::int64_t num_virtual_tokens = 10;  ///< prefix rows per layer
  bool prefix_projection = false;        ///< the paper's reparameterization MLP
  std::int64_t encoder_hidden_size = 0;  ///< its hidden width; 0: the model's hidden size
  nn::NamePatterns modules_to_save;      ///< also trained in full (e.g. the head)

  void validate() const {
    ftopt::detail::check(num_virtual_tokens >= 1, "Prefix: num_virtual_tokens must be >= 1, got ", num_virtual_tokens);
    ftopt::detail::check(encoder_hidden_size >= 0, "Prefix: encoder_hidden_size must be >= 0, got ", encoder_hidden_size);
  }
};

/// PEFT's PrefixEncoder: forward() gives [num_virtual_tokens, layers * 2 * hidden].
class PrefixEncoderImpl : public torch::nn::Module {
public:
  PrefixEncoderImpl(const PrefixOptions& o, std::int64_t layers, std::int64_t hidden)
      : tokens_(o.num_virtual_tokens), projection_(o.prefix_projection) {
    const std::int64_t out = layers * 2 * hidden;
    if (projection_) {
      const std::int64_t mid = o.encoder_hidden_size > 0 ? o.encoder_hidden_size : hidden;
      embedding_ = register_module("embedding", torch::nn::Embedding(tokens_, hidden));
      transform_ = register_module("transform", torch::nn::Sequential(nn::Linear(hidden, mid), torch::nn::Tanh(),
                                                                       nn::Linear(mid, out)));
    } else {
      embedding_ = register_module("embedding", torch::nn::Embedding(tokens_, out));
    }
  }

  at::Tensor forward() {
    auto rows = embedding_->weight;  // the embedding of tokens 0..P-1 is its whole table
    return projection_ ? transform_->forward(rows) : rows;
  }

private:
  std::int64_t tokens_;
  bool projection_;
  torch::nn::Embedding embedding_{nullptr};
  torch::nn::Sequential transform_{nullptr};
};
TORCH_MODULE(PrefixEncoder);

/// Layer i's slice of the encoder's output.
class PrefixSlice : public nn::PrefixSource {
public:
  PrefixSlice(PrefixEncoder encoder, std::int64_t layer, std::int64_t layers, std::int64_t hidden)
      : encoder_(std::move(encoder)), layer_(layer), layers_(layers), hidden_(hidden) {}
  std::pair<at::Tensor, at::Tensor> key_value() override {
    auto all = encoder_->forward().view({-1, layers_, 2, hidden_}).select(1, layer_);
    return {all.select(1, 0), all.select(1, 1)};
  }
  std::vector<at::Tensor> parameters() const override { return encoder_->parameters(); }

private:
  PrefixEncoder encoder_;
  std::int64_t layer_, layers_, hidden_;
};

class Prefix {
public:
  using axis = ftopt::axis::Peft;
  static constexpr const char* name = "prefix";  ///< in grids, tables and flags
  /// The Trainer rejects, at compile time, a model whose attention takes no prefix.
  static constexpr bool needs_prefix_attention = true;

  Prefix(PrefixOptions options = {}) : options_(std::move(options)) {}  // NOLINT: implicit

  void validate() const { options_.validate(); }
  const PrefixOptions& options() const { return options_; }

  void attach(torch::nn::Module& module) {
    std::vector<nn::PrefixAttention*> layers;
    for (const auto& item : module.named_modules("", false))
      if (auto* attention = dynamic_cast<nn::PrefixAttention*>(item.value().get())) layers.push_back(attention);
    ftopt::detail::check(!layers.empty(), "Prefix: the model has no attention layers that take a prefix");
    const std::int64_t hidden = layers.front()->prefix_width();
    for (auto& p : module.parameters()) p.requires_grad_(false);
    if (!options_.modules_to_save.empty())
      for (const auto& name : nn::parameters_under(module, options_.modules_to_save))
        module.named_parameters()[name].requires_grad_(true);
    const auto n = static_cast<std::int64_t>(layers.size());
    encoder_ = PrefixEncoder(options_, n, hidden);
    for (const auto& p : module.parameters()) {  // where and in what dtype the model lives
      encoder_->to(p.device(), p.scalar_type());
      break;
    }
    module.register_module("prefix_encoder", encoder_);
    for (std::int64_t i = 0; i < n; ++i)
      layers[static_cast<std::size_t>(i)]->set_prefix(std::make_shared<PrefixSlice>(encoder_, i, n, hidden));
  }

  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    return Full{}.trainable_parameters(module);
  }

  /// Prefixes are inputs to attention, not weight updates: nothing to fold; they stay.
  void merge(torch::nn::Module&) {}

  PrefixEncoder& encoder() { return encoder_; }

private:
  PrefixOptions options_;
  PrefixEncoder encoder_{nullptr};
};

static_assert(Policy<Prefix>);

} // namespace ftopt::peft
