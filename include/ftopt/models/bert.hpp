#pragma once
/// models::Bert: Hugging Face's BertForSequenceClassification (transformers/models/bert/
/// modeling_bert.py), module for module and name for name, so a BERT checkpoint's tensors load by
/// name (models/bert_pretrained.hpp):
///   bert.embeddings.{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}
///   bert.encoder.layer.N.attention.self.{query,key,value}, .attention.output.{dense,LayerNorm}
///   bert.encoder.layer.N.intermediate.dense, .output.{dense,LayerNorm}
///   bert.pooler.dense, classifier
/// Post-LayerNorm blocks, GELU as config.json's hidden_act names it, padding masked out of the
/// attention, the classifier on the pooled [CLS] token (pooler: dense + tanh), dropout where HF
/// has it. query/key/value are nn::Linear, so `peft::Lora({.targets = {"query", "value"}})` finds
/// them as the PEFT recipe names them.
///
/// The input is one int64 tensor, so that the Trainer's (input, target) batches carry text:
///   [B, T]     token ids; every position attended (HF without attention_mask);
///   [B, 2, T]  token ids and attention_mask (1 = token, 0 = padding): what text::BertTokenizer's
///              batches and the text pipeline give;
///   [B, 3, T]  token ids, attention_mask and token_type_ids.
///
///   ftopt::models::Bert bert({.vocab_size = 30522, .hidden = 384, .layers = 6, .heads = 12,
///                             .intermediate = 1536, .num_labels = 5});
///   auto logits = bert(ftopt::models::bert_input(batch.input_ids, batch.attention_mask));

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <torch/nn/functional/activation.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <ftopt/error.hpp>
#include <ftopt/kernel_options.hpp>
#include <ftopt/models/init_like_transformers.hpp>
#include <ftopt/nn/attention.hpp>
#include <ftopt/nn/attention_prefix.hpp>
#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/nn/dropout.hpp>
#include <ftopt/nn/layer_norm.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/shared_input_linears.hpp>

namespace ftopt::models {

/// HF's activations that BERT-family configs name (hidden_act).
enum class HiddenAct {
  Gelu,      ///< "gelu": exact (erf) GELU, BERT's
  GeluTanh,  ///< "gelu_new", "gelu_pytorch_tanh": the tanh approximation
  Relu,      ///< "relu"
};

/// What the classifier reads.
enum class BertPooling {
  Pooler,  ///< the [CLS] token through the pooler (dense + tanh): BertForSequenceClassification's
  Mean,    ///< the mean of the hidden states over the tokens (sentence-transformers' embedding);
           ///< the pooler, which nothing reads, is kept (it loads and saves) but frozen, so that no
           ///< optimizer or parallel::Ddp waits for a gradient it never gets
};

/// HF's BertConfig fields; the comments give config.json's names where they differ.
/// Defaults are bert-base-uncased's.
struct BertOptions {
  std::int64_t vocab_size = 30522;
  std::int64_t hidden = 768;         ///< hidden_size
  std::int64_t layers = 12;          ///< num_hidden_layers
  std::int64_t heads = 12;           ///< num_attention_heads
  std::int64_t intermediate = 3072;  ///< intermediate_size
  HiddenAct hidden_act = HiddenAct::Gelu;
  double dropout = 0.1;              ///< hidden_dropout_prob
  double attention_dropout = 0.1;    ///< attention_probs_dropout_prob
  std::optional<double> classifier_dropout;  ///< unset: dropout (HF's None)
  std::int64_t max_position_embeddings = 512;
  std::int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  std::int64_t pad_token_id = 0;
  double initializer_range = 0.02;
  std::int64_t num_labels = 2;
  /// Not in BertConfig: Mean suits checkpoints trained for mean-pooled embeddings (sentence-
  /// transformers' models), whose [CLS] token and pooler were never trained to summarize.
  BertPooling pooling = BertPooling::Pooler;
  /// Not in BertConfig: ftopt's kernels (shared_input: query, key and value as one GEMM; attention's).
  KernelOptions kernel;

  void validate() const {
    check(vocab_size >= 1, "BertOptions: vocab_size must be >= 1, got ", vocab_size);
    check(heads >= 1 && hidden % heads == 0, "BertOptions: hidden ", hidden, " must be a multiple of heads ", heads);
    check(layers >= 1, "BertOptions: layers must be >= 1, got ", layers);
    check(intermediate >= 1, "BertOptions: intermediate must be >= 1, got ", intermediate);
    check(num_labels >= 1, "BertOptions: num_labels must be >= 1, got ", num_labels);
    check(max_position_embeddings >= 1 && type_vocab_size >= 1,
          "BertOptions: max_position_embeddings and type_vocab_size must be >= 1, got ", max_position_embeddings,
          " and ", type_vocab_size);
    const double head_dropout = classifier_dropout.value_or(dropout);
    check(dropout >= 0 && dropout < 1 && attention_dropout >= 0 && attention_dropout < 1 && head_dropout >= 0 &&
              head_dropout < 1,
          "BertOptions: dropout probabilities must be in [0, 1), got ", dropout, ", ", attention_dropout, " and ",
          head_dropout);
  }
};

/// The Bert input from its parts: ids [B, T] and, optionally, attention_mask and token_type_ids.
inline at::Tensor bert_input(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                             const at::Tensor& token_type_ids = {}) {
  if (!attention_mask.defined()) return input_ids;
  if (!token_type_ids.defined()) return at::stack({input_ids, attention_mask.to(input_ids.scalar_type())}, 1);
  return at::stack({input_ids, attention_mask.to(input_ids.scalar_type()), token_type_ids.to(input_ids.scalar_type())}, 1);
}

/// sentence-transformers' mean pooling: the average of the hidden states over the tokens the
/// mask keeps. hidden [B, T, H], attention_mask [B, T] -> [B, H].
inline at::Tensor mean_pooling(const at::Tensor& hidden, const at::Tensor& attention_mask) {
  const at::Tensor mask = attention_mask.unsqueeze(-1).to(hidden.scalar_type());
  return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9);
}

namespace detail {
inline nn::Linear bert_linear(std::int64_t in, std::int64_t out) {
  return nn::Linear(torch::nn::LinearOptions(in, out));
}
inline nn::LayerNorm bert_layer_norm(const BertOptions& o) {
  return nn::LayerNorm(torch::nn::LayerNormOptions({o.hidden}).eps(o.layer_norm_eps));
}
/// Splits a Bert input into ids, attention mask (undefined: attend everywhere) and token types.
struct BertParts {
  at::Tensor ids, mask, types;
};
inline BertParts bert_parts(const at::Tensor& input) {
  check(!input.is_floating_point(), "models::Bert: the input must hold integer token ids, got ",
        at::toString(input.scalar_type()));
  if (input.dim() == 2) return {input, {}, {}};
  check(input.dim() == 3 && (input.size(1) == 2 || input.size(1) == 3),
        "models::Bert: the input must be ids [B, T], or [B, 2, T] (ids, attention_mask), or [B, 3, T] (ids, "
        "attention_mask, token_type_ids), got ", input.sizes());
  return {input.select(1, 0), input.select(1, 1), input.size(1) == 3 ? input.select(1, 2) : at::Tensor()};
}
} // namespace detail

/// HF BertEmbeddings: word + token type + absolute position embeddings, LayerNorm, dropout.
struct BertEmbeddingsImpl : torch::nn::Module {
  explicit BertEmbeddingsImpl(const BertOptions& o)
      : word_embeddings(register_module(
            "word_embeddings",
            torch::nn::Embedding(torch::nn::EmbeddingOptions(o.vocab_size, o.hidden).padding_idx(o.pad_token_id)))),
        position_embeddings(register_module("position_embeddings",
                                            torch::nn::Embedding(o.max_position_embeddings, o.hidden))),
        token_type_embeddings(register_module("token_type_embeddings", torch::nn::Embedding(o.type_vocab_size, o.hidden))),
        LayerNorm(register_module("LayerNorm", detail::bert_layer_norm(o))),
        dropout(register_module("dropout", nn::Dropout(o.dropout))) {}

  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& types) {
    const auto T = ids.size(1);
    check(T <= position_embeddings->options.num_embeddings(), "models::Bert: a sequence of ", T,
          " tokens is longer than max_position_embeddings ", position_embeddings->options.num_embeddings());
    auto positions = at::arange(T, ids.options().dtype(at::kLong));
    auto h = word_embeddings(ids) + position_embeddings(positions).unsqueeze(0);
    h = types.defined() ? h + token_type_embeddings(types) : h + token_type_embeddings->weight[0];
    return dropout(LayerNorm(h));
  }

  torch::nn::Embedding word_embeddings, position_embeddings, token_type_embeddings;
  nn::LayerNorm LayerNorm;  // NOLINT: HF's name
  nn::Dropout dropout;
};
TORCH_MODULE(BertEmbeddings);

/// HF BertSelfAttention: query, key, value and scaled dot-product attention over the tokens the
/// mask keeps (and the prefix rows peft::Prefix attaches, which every query sees).
struct BertSelfAttentionImpl : torch::nn::Module, nn::PrefixAttention {
  explicit BertSelfAttentionImpl(const BertOptions& o)
      : heads(o.heads), attention_dropout(o.attention_dropout), kernel(o.kernel),
        query(register_module("query", detail::bert_linear(o.hidden, o.hidden))),
        key(register_module("key", detail::bert_linear(o.hidden, o.hidden))),
        value(register_module("value", detail::bert_linear(o.hidden, o.hidden))) {}

  /// x [B, T, C]; mask: bool [B, 1, 1, T] (true = attend), or undefined.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    auto split = [&](const torch::Tensor& t) { return t.reshape({B, t.size(1), heads, C / heads}).transpose(1, 2); };
    auto [q, k, v] = nn::shared_input_linears<3>({query.get(), key.get(), value.get()}, x, kernel.shared_input);
    at::Tensor m = mask;
    if (prefix_) {
      auto [pk, pv] = prefix_->key_value();
      k = prepend(pk, k);
      v = prepend(pv, v);
      if (m.defined())
        m = at::cat({at::ones({B, 1, 1, pk.size(0)}, m.options()), m}, -1);
    }
    auto out = nn::scaled_dot_product_attention(split(q), split(k), split(v),
                                                    m.defined() ? std::optional<at::Tensor>(m) : std::nullopt,
                                                    is_training() ? attention_dropout : 0.0,
                                                    /*is_causal=*/false, kernel);
    return out.transpose(1, 2).reshape({B, T, C});
  }
  std::int64_t prefix_width() const override { return query->options.out_features(); }

  std::int64_t heads;
  double attention_dropout;
  KernelOptions kernel;  ///< query, key and value as one GEMM; attention's kernel
  nn::Linear query, key, value;
};
TORCH_MODULE(BertSelfAttention);

/// HF BertSelfOutput and BertOutput: dense, dropout, then LayerNorm over the residual sum.
struct BertResidualOutputImpl : torch::nn::Module {
  BertResidualOutputImpl(const BertOptions& o, std::int64_t in)
      : dense(register_module("dense", detail::bert_linear(in, o.hidden))),
        LayerNorm(register_module("LayerNorm", detail::bert_layer_norm(o))),
        dropout(register_module("dropout", nn::Dropout(o.dropout))) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& residual) {
    auto h = dropout(dense(x));
    // Under autocast the branch is bf16 and the stream fp32: the sum in the stream's dtype.
    if (h.scalar_type() != residual.scalar_type()) h = h.to(residual.scalar_type());
    return LayerNorm(h + residual);
  }
  nn::Linear dense;
  nn::LayerNorm LayerNorm;  // NOLINT: HF's name
  nn::Dropout dropout;
};
TORCH_MODULE(BertResidualOutput);

/// HF BertAttention: `self` then `output`.
struct BertAttentionImpl : torch::nn::Module {
  explicit BertAttentionImpl(const BertOptions& o)
      : self(register_module("self", BertSelfAttention(o))),
        output(register_module("output", BertResidualOutput(o, o.hidden))) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) { return output(self->forward(x, mask), x); }
  BertSelfAttention self;
  BertResidualOutput output;
};
TORCH_MODULE(BertAttention);

/// HF BertLayer: attention, then intermediate.dense + activation, then output (post-LayerNorm).
struct BertLayerImpl : torch::nn::Module {
  explicit BertLayerImpl(const BertOptions& o)
      : act(o.hidden_act),
        attention(register_module("attention", BertAttention(o))),
        intermediate_dense(detail::bert_linear(o.hidden, o.intermediate)),
        output(register_module("output", BertResidualOutput(o, o.intermediate))) {
    auto intermediate = std::make_shared<torch::nn::Module>();  // HF nests it: intermediate.dense
    intermediate->register_module("dense", intermediate_dense);
    register_module("intermediate", intermediate);
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    auto h = attention->forward(x, mask);
    return output(activation(intermediate_dense(h)), h);
  }
  torch::Tensor activation(const torch::Tensor& x) const {
    switch (act) {
    case HiddenAct::Gelu: return torch::gelu(x);
    case HiddenAct::GeluTanh: return torch::gelu(x, "tanh");
    case HiddenAct::Relu: return torch::relu(x);
    }
    return x;
  }
  HiddenAct act;
  BertAttention attention;
  nn::Linear intermediate_dense;
  BertResidualOutput output;
};
TORCH_MODULE(BertLayer);

/// HF BertPooler: dense + tanh over the first ([CLS]) token.
struct BertPoolerImpl : torch::nn::Module {
  explicit BertPoolerImpl(const BertOptions& o) : dense(register_module("dense", detail::bert_linear(o.hidden, o.hidden))) {}
  torch::Tensor forward(const torch::Tensor& hidden) { return torch::tanh(dense(hidden.select(1, 0))); }
  nn::Linear dense;
};
TORCH_MODULE(BertPooler);

/// HF BertModel: embeddings, encoder and pooler. Its encoder layers are checkpointable blocks
/// (memory::Checkpoint; HF: gradient_checkpointing_enable()).
struct BertModelImpl : torch::nn::Module, nn::CheckpointableBlocks {
  explicit BertModelImpl(const BertOptions& o)
      : embeddings(register_module("embeddings", BertEmbeddings(o))), pooler(BertPooler(o)) {
    auto encoder = std::make_shared<torch::nn::Module>();
    for (std::int64_t i = 0; i < o.layers; ++i) layer->push_back(BertLayer(o));
    encoder->register_module("layer", layer);
    register_module("encoder", encoder);
    register_module("pooler", pooler);
  }

  /// The last hidden states [B, T, H] of a Bert input (ids, or ids with mask and token types).
  torch::Tensor forward(const torch::Tensor& input) {
    const auto parts = detail::bert_parts(input);
    return encode(parts.ids, parts.mask, parts.types);
  }
  torch::Tensor encode(const torch::Tensor& ids, const torch::Tensor& attention_mask = {},
                       const torch::Tensor& token_type_ids = {}) {
    at::Tensor mask;  // bool [B, 1, 1, T]; left out when nothing is padding, as the kernels run faster
    if (attention_mask.defined()) {
      const auto kept = attention_mask.ne(0);
      if (!kept.all().item<bool>()) mask = kept.view({attention_mask.size(0), 1, 1, attention_mask.size(1)});
    }
    auto h = embeddings->forward(ids, token_type_ids);
    for (std::size_t i = 0; i < layer->size(); ++i) h = run_layer(static_cast<std::int64_t>(i), h, mask);
    return h;
  }
  /// Layer i of the encoder (HF: bert.encoder.layer[i]).
  BertLayerImpl& encoder_layer(std::size_t i) { return *layer[i]->as<BertLayerImpl>(); }

  BertEmbeddings embeddings;
  torch::nn::ModuleList layer;
  BertPooler pooler;

private:
  at::Tensor run_layer(std::int64_t i, const at::Tensor& h, const at::Tensor& mask) {
    BertLayerImpl& block = encoder_layer(static_cast<std::size_t>(i));
    return run_block(i, block, h, [b = &block, mask](const at::Tensor& x) { return b->forward(x, mask); });
  }
};
TORCH_MODULE(BertModel);

/// HF BertForSequenceClassification: BertModel, dropout and a linear classifier on the pooled
/// [CLS] token (or, with BertPooling::Mean, on the mean of the hidden states over the tokens).
/// forward(input) -> logits [B, num_labels].
class BertImpl : public torch::nn::Module {
public:
  /// Its self-attention layers accept prefixes (peft::Prefix).
  static constexpr bool has_prefix_attention = true;
  /// Its encoder layers can be checkpointed (memory::Checkpoint).
  static constexpr bool has_checkpointable_blocks = true;

  explicit BertImpl(BertOptions options = {})
      : options_((options.validate(), std::move(options))),
        bert(register_module("bert", BertModel(options_))),
        dropout(register_module("dropout", nn::Dropout(options_.classifier_dropout.value_or(options_.dropout)))),
        classifier(register_module("classifier", detail::bert_linear(options_.hidden, options_.num_labels))) {
    initialize();
    if (options_.pooling == BertPooling::Mean)
      for (auto& p : bert->pooler->parameters()) p.requires_grad_(false);
  }

  torch::Tensor forward(const torch::Tensor& input) {
    if (options_.pooling == BertPooling::Pooler) return classifier(dropout(bert->pooler(bert(input))));
    return classifier(dropout(sentence_embedding(input)));
  }

  /// sentence-transformers' sentence embedding: mean pooling over the mask (no L2 norm).
  torch::Tensor sentence_embedding(const torch::Tensor& input) {
    const auto parts = detail::bert_parts(input);
    auto hidden = bert->encode(parts.ids, parts.mask, parts.types);
    return mean_pooling(hidden, parts.mask.defined() ? parts.mask : at::ones_like(parts.ids));
  }

  const BertOptions& options() const { return options_; }

  /// HF BertPreTrainedModel._init_weights: Linear and Embedding weights normal(0, 0.02), biases
  /// 0, the padding row of word_embeddings 0, LayerNorm 1 and 0. Loading a checkpoint
  /// overwrites all but what the checkpoint lacks (the classifier of a BertModel file).
  void initialize() {
    ftopt::detail::init_like_transformers(*this, options_.initializer_range);
    torch::NoGradGuard no_grad;
    bert->embeddings->word_embeddings->weight[options_.pad_token_id].zero_();
  }

private:
  BertOptions options_;

public:
  BertModel bert;
  nn::Dropout dropout;
  nn::Linear classifier;
};

/// The module handle, constructible from braced options.
class Bert : public torch::nn::ModuleHolder<BertImpl> {
public:
  using torch::nn::ModuleHolder<BertImpl>::ModuleHolder;
  Bert(BertOptions options)  // NOLINT: implicit, so `Bert model({...})` reads well
      : ModuleHolder(std::make_shared<BertImpl>(std::move(options))) {}
};

} // namespace ftopt::models
