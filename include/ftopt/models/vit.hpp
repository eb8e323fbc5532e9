#pragma once
/// models::ViT: Hugging Face's ViTForImageClassification, module for module and name for name
/// (transformers/models/vit/modeling_vit.py), so a HF ViT checkpoint's tensors load by name:
///   vit.embeddings.{cls_token, position_embeddings, patch_embeddings.projection}
///   vit.encoder.layer.N.attention.attention.{query,key,value}
///   vit.encoder.layer.N.attention.output.dense, .intermediate.dense, .output.dense,
///   vit.encoder.layer.N.layernorm_before / layernorm_after, vit.layernorm, classifier
/// Pre-norm blocks, exact GELU, LayerNorm eps 1e-12, the classifier on the [CLS] token: HF's
/// defaults. Attention goes through nn::scaled_dot_product_attention (SDPA on LibTorch 2.x).
/// query/key/value are nn::Linear, so `targets = {"query", "value"}` finds them; their products
/// run as one GEMM (nn::shared_input_linears) whenever what is attached to them allows.
///
///   ftopt::models::ViT vit({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = 64,
///                           .layers = 4, .heads = 4, .intermediate = 128, .num_labels = 10});

#include <cmath>
#include <cstdint>
#include <memory>

#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/attention.hpp>
#include <ftopt/nn/conv2d.hpp>
#include <ftopt/nn/layer_norm.hpp>
#include <ftopt/nn/attention_prefix.hpp>
#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/nn/dropout.hpp>
#include <ftopt/nn/chunked_attention.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/kernel_options.hpp>
#include <ftopt/nn/shared_input_linears.hpp>

namespace ftopt::models {

/// How self-attention is computed (HF's `attn_implementation`): Sdpa is
/// nn::scaled_dot_product_attention (fused kernels on LibTorch 2.x, the plain math on 1.13);
/// Chunked is nn::chunked_attention, which keeps no attention matrix for the backward on any
/// LibTorch (no attention dropout).
enum class AttnImplementation { Sdpa, Chunked };

/// HF's ViTConfig fields, by the same names where they exist; defaults are google/vit-base.
struct ViTOptions {
  std::int64_t image_size = 224;
  std::int64_t patch_size = 16;
  std::int64_t channels = 3;        ///< HF: num_channels
  std::int64_t hidden = 768;        ///< HF: hidden_size
  std::int64_t layers = 12;         ///< HF: num_hidden_layers
  std::int64_t heads = 12;          ///< HF: num_attention_heads
  std::int64_t intermediate = 3072; ///< HF: intermediate_size
  std::int64_t num_labels = 1000;
  double dropout = 0.0;             ///< HF: hidden_dropout_prob
  double attention_dropout = 0.0;   ///< HF: attention_probs_dropout_prob
  double layer_norm_eps = 1e-12;
  bool qkv_bias = true;
  double initializer_range = 0.02;
  AttnImplementation attn_implementation = AttnImplementation::Sdpa;
  std::int64_t attention_chunk = 128;  ///< query rows per block, for AttnImplementation::Chunked
  /// Not in ViTConfig: ftopt's kernels (shared_input: query, key and value as one GEMM; attention's).
  KernelOptions kernel;

  void validate() const {
    using ftopt::detail::check;
    check(patch_size >= 1 && image_size % patch_size == 0, "ViTOptions: image_size ", image_size,
          " must be a multiple of patch_size ", patch_size);
    check(heads >= 1 && hidden % heads == 0, "ViTOptions: hidden ", hidden,
          " must be a multiple of heads ", heads);
    check(layers >= 1, "ViTOptions: layers must be >= 1, got ", layers);
    check(num_labels >= 1, "ViTOptions: num_labels must be >= 1, got ", num_labels);
    check(dropout >= 0 && dropout < 1 && attention_dropout >= 0 && attention_dropout < 1,
          "ViTOptions: dropout probabilities must be in [0, 1), got ", dropout, " and ", attention_dropout);
    if (attn_implementation == AttnImplementation::Chunked) {
      check(attention_dropout == 0, "ViTOptions: attn_implementation Chunked applies no attention dropout, but "
                                    "attention_dropout is ", attention_dropout);
      check(attention_chunk >= 1, "ViTOptions: attention_chunk must be >= 1, got ", attention_chunk);
    }
  }
  std::int64_t patches() const { return (image_size / patch_size) * (image_size / patch_size); }
};

namespace detail {
inline nn::Linear linear(std::int64_t in, std::int64_t out, bool bias = true) {
  return nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}
inline nn::LayerNorm layer_norm(const ViTOptions& o) {
  return nn::LayerNorm(torch::nn::LayerNormOptions({o.hidden}).eps(o.layer_norm_eps));
}
} // namespace detail

/// HF ViTPatchEmbeddings: a conv with kernel = stride = patch size.
struct ViTPatchEmbeddingsImpl : torch::nn::Module {
  explicit ViTPatchEmbeddingsImpl(const ViTOptions& o)
      : projection(register_module("projection",
                                   nn::Conv2d(torch::nn::Conv2dOptions(o.channels, o.hidden, o.patch_size)
                                                  .stride(o.patch_size)))) {}
  torch::Tensor forward(const torch::Tensor& pixels) { return projection(pixels).flatten(2).transpose(1, 2); }
  nn::Conv2d projection;
};
TORCH_MODULE(ViTPatchEmbeddings);

/// HF ViTEmbeddings: [CLS] + patch embeddings + learned position embeddings.
struct ViTEmbeddingsImpl : torch::nn::Module {
  explicit ViTEmbeddingsImpl(const ViTOptions& o)
      : cls_token(register_parameter("cls_token", torch::zeros({1, 1, o.hidden}))),
        position_embeddings(register_parameter("position_embeddings", torch::zeros({1, o.patches() + 1, o.hidden}))),
        patch_embeddings(register_module("patch_embeddings", ViTPatchEmbeddings(o))),
        dropout(register_module("dropout", nn::Dropout(o.dropout))) {}
  torch::Tensor forward(const torch::Tensor& pixels) {
    auto patches = patch_embeddings(pixels);
    auto cls = cls_token.expand({patches.size(0), -1, -1});
    return dropout(torch::cat({cls, patches}, 1) + position_embeddings);
  }
  torch::Tensor cls_token, position_embeddings;
  ViTPatchEmbeddings patch_embeddings;
  nn::Dropout dropout;
};
TORCH_MODULE(ViTEmbeddings);

/// HF ViTSelfAttention: query, key, value projections and scaled dot-product attention.
struct ViTSelfAttentionImpl : torch::nn::Module, nn::PrefixAttention {
  explicit ViTSelfAttentionImpl(const ViTOptions& o)
      : heads(o.heads), attention_dropout(o.attention_dropout),
        chunk(o.attn_implementation == AttnImplementation::Chunked ? o.attention_chunk : 0),
        kernel(o.kernel),
        query(register_module("query", detail::linear(o.hidden, o.hidden, o.qkv_bias))),
        key(register_module("key", detail::linear(o.hidden, o.hidden, o.qkv_bias))),
        value(register_module("value", detail::linear(o.hidden, o.hidden, o.qkv_bias))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    auto split = [&](const torch::Tensor& t) { return t.reshape({B, t.size(1), heads, C / heads}).transpose(1, 2); };
    auto [q, k, v] = nn::shared_input_linears<3>({query.get(), key.get(), value.get()}, x, kernel.shared_input);
    if (prefix_) {  // prefix tuning: extra key and value rows every query attends to
      auto [pk, pv] = prefix_->key_value();
      k = prepend(pk, k);
      v = prepend(pv, v);
    }
    q = split(q);
    k = split(k);
    v = split(v);
    auto out = chunk > 0 ? nn::chunked_attention(q, k, v, {.chunk = chunk})
                         : nn::scaled_dot_product_attention(q, k, v, std::nullopt,
                                                                is_training() ? attention_dropout : 0.0,
                                                                /*is_causal=*/false, kernel);
    return out.transpose(1, 2).reshape({B, T, C});
  }
  std::int64_t prefix_width() const override { return query->options.out_features(); }

  std::int64_t heads;
  double attention_dropout;
  std::int64_t chunk;  ///< > 0: chunked attention with this many query rows per block
  KernelOptions kernel;  ///< query, key and value as one GEMM; attention's kernel
  nn::Linear query, key, value;
};
TORCH_MODULE(ViTSelfAttention);

/// HF ViTSelfOutput: the attention's output projection (the residual is added by the layer).
struct ViTSelfOutputImpl : torch::nn::Module {
  explicit ViTSelfOutputImpl(const ViTOptions& o)
      : dense(register_module("dense", detail::linear(o.hidden, o.hidden))),
        dropout(register_module("dropout", nn::Dropout(o.dropout))) {}
  torch::Tensor forward(const torch::Tensor& x) { return dropout(dense(x)); }
  nn::Linear dense;
  nn::Dropout dropout;
};
TORCH_MODULE(ViTSelfOutput);

/// HF ViTAttention: `attention` (self-attention) then `output`.
struct ViTAttentionImpl : torch::nn::Module {
  explicit ViTAttentionImpl(const ViTOptions& o)
      : attention(register_module("attention", ViTSelfAttention(o))),
        output(register_module("output", ViTSelfOutput(o))) {}
  torch::Tensor forward(const torch::Tensor& x) { return output(attention(x)); }
  ViTSelfAttention attention;
  ViTSelfOutput output;
};
TORCH_MODULE(ViTAttention);

/// HF ViTLayer: pre-norm attention and MLP, each with a residual.
struct ViTLayerImpl : torch::nn::Module {
  explicit ViTLayerImpl(const ViTOptions& o)
      : attention(register_module("attention", ViTAttention(o))),
        intermediate_dense(detail::linear(o.hidden, o.intermediate)),
        output_dense(detail::linear(o.intermediate, o.hidden)),
        output_dropout(nn::Dropout(o.dropout)),
        layernorm_before(detail::layer_norm(o)),
        layernorm_after(detail::layer_norm(o)) {
    // HF nests these: intermediate.dense, output.dense (and output.dropout).
    auto intermediate = std::make_shared<torch::nn::Module>();
    intermediate->register_module("dense", intermediate_dense);
    register_module("intermediate", intermediate);
    auto output = std::make_shared<torch::nn::Module>();
    output->register_module("dense", output_dense);
    output->register_module("dropout", output_dropout);
    register_module("output", output);
    register_module("layernorm_before", layernorm_before);
    register_module("layernorm_after", layernorm_after);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = residual(attention(layernorm_before(x)), x);
    auto m = output_dropout(output_dense(torch::gelu(intermediate_dense(layernorm_after(h)))));
    return residual(m, h);
  }
  /// branch + stream in the stream's dtype. Under autocast the branch is bf16 and the stream
  /// fp32: the same sum as the promoting add, but ATen's add of two dtypes converts element by
  /// element (2x the time of a cast and an add, measured on 2.11).
  static torch::Tensor residual(const torch::Tensor& branch, const torch::Tensor& stream) {
    return branch.scalar_type() == stream.scalar_type() ? branch + stream : branch.to(stream.scalar_type()) + stream;
  }
  ViTAttention attention;
  nn::Linear intermediate_dense, output_dense;
  nn::Dropout output_dropout;
  nn::LayerNorm layernorm_before, layernorm_after;
};
TORCH_MODULE(ViTLayer);

/// HF ViTModel without the pooler (as ViTForImageClassification builds it). Its encoder layers
/// are checkpointable blocks (memory::Checkpoint; HF: gradient_checkpointing_enable()).
struct ViTModelImpl : torch::nn::Module, nn::CheckpointableBlocks {
  explicit ViTModelImpl(const ViTOptions& o)
      : embeddings(register_module("embeddings", ViTEmbeddings(o))),
        layernorm(detail::layer_norm(o)) {
    auto encoder = std::make_shared<torch::nn::Module>();
    for (std::int64_t i = 0; i < o.layers; ++i) layer->push_back(ViTLayer(o));
    encoder->register_module("layer", layer);
    register_module("encoder", encoder);
    register_module("layernorm", layernorm);
  }
  torch::Tensor forward(const torch::Tensor& pixels) {
    auto h = embeddings(pixels);
    for (std::size_t i = 0; i < layer->size(); ++i) h = run_block(static_cast<std::int64_t>(i), encoder_layer(i), h);
    return layernorm(h);
  }
  /// Layer i of the encoder (HF: vit.encoder.layer[i]).
  ViTLayerImpl& encoder_layer(std::size_t i) { return *layer[i]->as<ViTLayerImpl>(); }

  ViTEmbeddings embeddings;
  torch::nn::ModuleList layer;
  nn::LayerNorm layernorm;
};
TORCH_MODULE(ViTModel);

class ViTImpl : public torch::nn::Module {
public:
  /// Its self-attention layers accept prefixes (peft::Prefix).
  static constexpr bool has_prefix_attention = true;
  /// Its encoder layers can be checkpointed (memory::Checkpoint).
  static constexpr bool has_checkpointable_blocks = true;

  explicit ViTImpl(ViTOptions options = {})
      : options_((options.validate(), std::move(options))),
        vit(register_module("vit", ViTModel(options_))),
        classifier(register_module("classifier", detail::linear(options_.hidden, options_.num_labels))) {
    initialize();
  }

  /// pixels [B, channels, image_size, image_size], or [B, H, W] for one channel -> logits.
  torch::Tensor forward(const torch::Tensor& pixels) {
    auto x = pixels.dim() == 3 ? pixels.unsqueeze(1) : pixels;
    return classifier(vit(x).select(1, 0));
  }

  const ViTOptions& options() const { return options_; }

private:
  /// HF ViTPreTrainedModel._init_weights: Linear/Conv2d weights trunc_normal(0, 0.02) with
  /// nn.init's default bounds +-2 (absolute: 100 standard deviations, so a clamp there is the
  /// same distribution), biases 0; LayerNorm 1 and 0; position embeddings and the CLS token
  /// trunc_normal(0, 0.02).
  void initialize() {
    torch::NoGradGuard no_grad;
    const double std = options_.initializer_range;
    auto trunc = [std](torch::Tensor& t) { t.normal_(0.0, std).clamp_(-2.0, 2.0); };
    for (auto& module : modules(false)) {
      if (auto* l = module->as<nn::LinearImpl>()) {
        trunc(l->weight);
        if (l->bias.defined()) l->bias.zero_();
      } else if (auto* c = module->as<nn::Conv2dImpl>()) {
        trunc(c->weight);
        if (c->bias.defined()) c->bias.zero_();
      }
    }
    trunc(vit->embeddings->position_embeddings);
    trunc(vit->embeddings->cls_token);
  }

  ViTOptions options_;

public:
  ViTModel vit;
  nn::Linear classifier;
};

/// The module handle, constructible from braced options.
class ViT : public torch::nn::ModuleHolder<ViTImpl> {
public:
  using torch::nn::ModuleHolder<ViTImpl>::ModuleHolder;
  ViT(ViTOptions options)  // NOLINT: implicit, so `ViT model({...})` reads well
      : ModuleHolder(std::make_shared<ViTImpl>(std::move(options))) {}
};

} // namespace ftopt::models
