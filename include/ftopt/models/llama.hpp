#pragma once
/// models::Llama: transformers' LlamaForCausalLM (models/llama/modeling_llama.py), module for
/// module and name for name, so a Hugging Face or GGUF checkpoint loads by name
/// (models/llama_pretrained.hpp) and PEFT's LoRA targets are the ones its recipes name:
///   model.embed_tokens, model.norm, lm_head (absent when tie_word_embeddings: the logits use
///   model.embed_tokens.weight, as Hugging Face ties them)
///   model.layers.N.{input_layernorm, post_attention_layernorm}
///   model.layers.N.self_attn.{q_proj, k_proj, v_proj, o_proj}, .mlp.{gate_proj, up_proj, down_proj}
/// Pre-norm decoder layers with RMSNorm, rotary position embeddings (rope_theta, optionally
/// Llama 3's frequency scaling), grouped-query attention (num_key_value_heads <= heads), causal
/// and padding masks, SwiGLU. Qwen2 is the same model with biases on q/k/v: `qkv_bias`. Gemma 3
/// (transformers' Gemma3ForCausalLM) is the same core with Gemma's parts switched on (LlamaOptions'
/// norm_unit_offset, qk_norm, sandwich_norms, activation, scale_embeddings, sliding_layers): RMSNorm scaling by 1 + w, q_norm and k_norm on each head, a norm after
/// attention and one on each side of the MLP (model.layers.N.{post_attention_layernorm,
/// pre_feedforward_layernorm, post_feedforward_layernorm}), GELU-tanh gating, embeddings scaled by
/// sqrt(hidden), and sliding-window attention with its own rope base on most layers.
///
/// The input is one int64 tensor, so that the Trainer's (input, target) batches carry text:
///   [B, T]     token ids, every position a token;
///   [B, 2, T]  token ids and attention_mask (1 = token, 0 = padding; padding keys are masked).
/// Positions are 0..T-1 in every row (transformers' default), so pad on the right for training.
///
///   ftopt::models::Llama llm({.vocab_size = 49152, .hidden = 576, .intermediate = 1536,
///                             .layers = 30, .heads = 9, .kv_heads = 3, .rope_theta = 1e5});
///   at::Tensor logits = llm(ids);  // [B, T, vocab]

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <ftopt/error.hpp>
#include <ftopt/kernel_options.hpp>
#include <ftopt/models/init_like_transformers.hpp>
#include <ftopt/nn/attention.hpp>
#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/rms_norm.hpp>
#include <ftopt/nn/rotary.hpp>
#include <ftopt/nn/shared_input_linears.hpp>

namespace ftopt::models {

/// Llama 3's rope frequency scaling (rope_type "llama3"): long wavelengths divided by `factor`,
/// short ones kept, those between blended.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

/// The MLP's gate activation (hidden_act / hidden_activation).
enum class GateActivation { Silu, GeluTanh };

/// transformers' LlamaConfig fields; comments give config.json's names where they differ.
/// Defaults are SmolLM2-135M's.
struct LlamaOptions {
  std::int64_t vocab_size = 49152;
  std::int64_t hidden = 576;          ///< hidden_size
  std::int64_t intermediate = 1536;   ///< intermediate_size
  std::int64_t layers = 30;           ///< num_hidden_layers
  std::int64_t heads = 9;             ///< num_attention_heads
  std::int64_t kv_heads = 3;          ///< num_key_value_heads
  std::int64_t head_dim = 0;          ///< 0: hidden / heads
  std::int64_t max_position_embeddings = 8192;
  double rms_norm_eps = 1e-5;
  double rope_theta = 100000.0;
  std::optional<Llama3RopeScaling> rope_scaling;  ///< rope_parameters / rope_scaling of type "llama3"
  bool qkv_bias = false;              ///< attention_bias (Llama: q, k, v and o), or Qwen2's q/k/v biases
  bool o_bias = false;                ///< attention_bias on o_proj (Llama's, not Qwen2's)
  bool mlp_bias = false;
  bool tie_word_embeddings = true;
  double initializer_range = 0.02;
  // Gemma 3's parts (Gemma3TextConfig), all off for Llama and Qwen2:
  bool norm_unit_offset = false;   ///< every RMSNorm scales by 1 + weight (Gemma)
  bool qk_norm = false;            ///< self_attn.q_norm and k_norm: RMSNorm over each head's queries and keys
  bool sandwich_norms = false;     ///< a norm after attention and one on each side of the MLP
  GateActivation activation = GateActivation::Silu;  ///< hidden_act / hidden_activation
  bool scale_embeddings = false;   ///< the embeddings times sqrt(hidden) (Gemma's normalizer)
  std::int64_t sliding_window = 0; ///< what sliding layers attend to: the last sliding_window tokens
  std::vector<bool> sliding_layers;  ///< layer_types: true for "sliding_attention"; empty: none
  double rope_local_theta = 10000.0;  ///< the sliding layers' rope_theta (rope_parameters.sliding_attention)
  std::int64_t query_pre_attn_scalar = 0;  ///< scores scaled by 1/sqrt(this) (Gemma's); 0: by the head dimension's
  /// Not in LlamaConfig: ftopt's kernels (q/k/v and gate/up as one GEMM each; attention's).
  KernelOptions kernel;

  std::int64_t dim_of_head() const { return head_dim > 0 ? head_dim : hidden / heads; }
  bool is_sliding(std::size_t layer) const { return layer < sliding_layers.size() && sliding_layers[layer]; }
  bool any_sliding() const { return std::find(sliding_layers.begin(), sliding_layers.end(), true) != sliding_layers.end(); }
  void validate() const {
    check(vocab_size >= 1 && hidden >= 1 && intermediate >= 1 && layers >= 1, "LlamaOptions: vocab_size, hidden, "
          "intermediate and layers must be >= 1, got ", vocab_size, ", ", hidden, ", ", intermediate, ", ", layers);
    check(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0, "LlamaOptions: heads ", heads,
          " must be a multiple of kv_heads ", kv_heads);
    check(head_dim > 0 || hidden % heads == 0, "LlamaOptions: hidden ", hidden, " is not a multiple of heads ", heads,
          "; give head_dim");
    check(dim_of_head() % 2 == 0, "LlamaOptions: the head dimension must be even for rotary embeddings, got ",
          dim_of_head());
    check(rope_theta > 0 && rms_norm_eps >= 0, "LlamaOptions: rope_theta must be > 0 and rms_norm_eps >= 0, got ",
          rope_theta, " and ", rms_norm_eps);
    check(query_pre_attn_scalar >= 0, "LlamaOptions: query_pre_attn_scalar must be >= 0, got ", query_pre_attn_scalar);
    check(sliding_layers.empty() || static_cast<std::int64_t>(sliding_layers.size()) == layers, "LlamaOptions: ",
          sliding_layers.size(), " layer types for ", layers, " layers");
    check(!any_sliding() || sliding_window >= 1, "LlamaOptions: sliding layers need sliding_window >= 1, got ",
          sliding_window);
    if (rope_scaling)
      check(rope_scaling->factor > 0 && rope_scaling->high_freq_factor > rope_scaling->low_freq_factor &&
                rope_scaling->low_freq_factor > 0 && rope_scaling->original_max_position_embeddings > 0,
            "LlamaOptions: llama3 rope scaling needs factor > 0 and high_freq_factor > low_freq_factor > 0, got ",
            rope_scaling->factor, ", ", rope_scaling->high_freq_factor, " and ", rope_scaling->low_freq_factor);
  }
};

/// The rotary inverse frequencies [head_dim / 2] (float32): theta^(-2i/d), with Llama 3's
/// scaling when asked (transformers' _compute_llama3_parameters).
/// `local`: the sliding layers' (rope_local_theta, no scaling).
inline at::Tensor rope_inverse_frequencies(const LlamaOptions& o, bool local = false) {
  const auto d = o.dim_of_head();
  const double theta = local ? o.rope_local_theta : o.rope_theta;
  at::Tensor inv = 1.0 / at::pow(theta, at::arange(0, d, 2, at::kLong).to(at::kFloat) / static_cast<double>(d));
  if (!o.rope_scaling || local) return inv;
  const auto& s = *o.rope_scaling;
  const double old = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old / s.low_freq_factor, high_wavelen = old / s.high_freq_factor;
  const at::Tensor wavelen = 2 * std::numbers::pi / inv;
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv / s.factor, inv);
  const at::Tensor smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = wavelen.ge(high_wavelen).logical_and(wavelen.le(low_wavelen));
  return at::where(medium, smoothed, scaled);
}

/// The keys and values of the tokens a Llama has seen, per layer, for generation: each step
/// runs only the new tokens (LlamaImpl::forward_cached). Keys are stored after their rotation.
struct LlamaKvCache {
  std::vector<at::Tensor> keys, values;  ///< per layer [B, kv_heads, capacity, head_dim]
  std::int64_t length = 0;               ///< tokens stored
  std::int64_t capacity = 0;
};

namespace detail {
inline nn::Linear llama_linear(std::int64_t in, std::int64_t out, bool bias) {
  return nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}
} // namespace detail

/// transformers' LlamaAttention: q/k/v projections, rotary embeddings on q and k, attention
/// over kv_heads shared by groups of heads, o_proj.
struct LlamaAttentionImpl : torch::nn::Module {
  explicit LlamaAttentionImpl(const LlamaOptions& o)
      : heads(o.heads), kv_heads(o.kv_heads), head_dim(o.dim_of_head()),
        query_scale(o.query_pre_attn_scalar > 0 && o.query_pre_attn_scalar != head_dim
                        ? std::sqrt(static_cast<double>(head_dim) / static_cast<double>(o.query_pre_attn_scalar))
                        : 1.0),
        kernel(o.kernel),
        q_proj(register_module("q_proj", detail::llama_linear(o.hidden, o.heads * head_dim, o.qkv_bias))),
        k_proj(register_module("k_proj", detail::llama_linear(o.hidden, o.kv_heads * head_dim, o.qkv_bias))),
        v_proj(register_module("v_proj", detail::llama_linear(o.hidden, o.kv_heads * head_dim, o.qkv_bias))),
        o_proj(register_module("o_proj", detail::llama_linear(o.heads * head_dim, o.hidden, o.o_bias))) {
    if (o.qk_norm) {
      q_norm = register_module("q_norm", nn::RmsNorm(head_dim, o.rms_norm_eps, o.kernel.row_kernels, o.kernel.isa,
                                                     o.norm_unit_offset));
      k_norm = register_module("k_norm", nn::RmsNorm(head_dim, o.rms_norm_eps, o.kernel.row_kernels, o.kernel.isa,
                                                     o.norm_unit_offset));
    }
  }

  /// x [B, T, C]; cos, sin [T, head_dim], or [B, 1, T, head_dim] for positions of their own
  /// (packed rows); mask bool [B, 1, T, T'] (true = attend), or undefined for causal attention over
  /// every position. With a cache (layer `layer` of it), the new keys and values are stored at
  /// its end and the queries attend to everything stored.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, LlamaKvCache* cache = nullptr, std::size_t layer = 0) {
    const auto B = x.size(0), T = x.size(1);
    auto [q, k, v] = nn::shared_input_linears<3>({q_proj.get(), k_proj.get(), v_proj.get()}, x, kernel.shared_input);
    auto split = [&](const at::Tensor& t, std::int64_t n) { return t.view({B, T, n, head_dim}).transpose(1, 2); };
    at::Tensor qs = split(q, heads), ks = split(k, kv_heads);
    if (q_norm) {  // Gemma 3: each head's queries and keys normalized before the rotation
      qs = q_norm(qs);
      ks = k_norm(ks);
    }
    at::Tensor qh = nn::apply_rotary(qs, cos, sin, kernel.row_kernels, kernel.isa);
    // Attention scales by 1/sqrt(head_dim); scores scaled by 1/sqrt(query_pre_attn_scalar) instead
    // take the difference on the queries.
    if (query_scale != 1.0) qh = qh * at::scalar_tensor(query_scale, qh.options());
    at::Tensor kh = nn::apply_rotary(ks, cos, sin, kernel.row_kernels, kernel.isa);
    at::Tensor vh = split(v, kv_heads);
    bool causal = !mask.defined();
    if (cache != nullptr) {
      auto& keys = cache->keys[layer];
      auto& values = cache->values[layer];
      if (!keys.defined() || keys.scalar_type() != kh.scalar_type()) {
        keys = at::empty({B, kv_heads, cache->capacity, head_dim}, kh.options());
        values = at::empty({B, kv_heads, cache->capacity, head_dim}, vh.options());
      }
      const auto end = cache->length + T;
      keys.narrow(2, cache->length, T).copy_(kh);
      values.narrow(2, cache->length, T).copy_(vh);
      kh = keys.narrow(2, 0, end);
      vh = values.narrow(2, 0, end);
      // Later steps attend to all that is stored (the mask given, or none for one new token).
      causal = causal && cache->length == 0;
    }
    if (heads != kv_heads) {  // transformers' repeat_kv
      kh = kh.repeat_interleave(heads / kv_heads, 1);
      vh = vh.repeat_interleave(heads / kv_heads, 1);
    }
    auto out = nn::scaled_dot_product_attention(qh, kh, vh, mask.defined() ? std::optional<at::Tensor>(mask)
                                                                               : std::nullopt,
                                                    0.0, causal, kernel);
    return o_proj(out.transpose(1, 2).reshape({B, T, heads * head_dim}));
  }

  std::int64_t heads, kv_heads, head_dim;
  double query_scale;  ///< sqrt(head_dim / query_pre_attn_scalar), 1 where they are equal
  KernelOptions kernel;
  nn::Linear q_proj, k_proj, v_proj, o_proj;
  nn::RmsNorm q_norm{nullptr}, k_norm{nullptr};  ///< with LlamaOptions::qk_norm
};
TORCH_MODULE(LlamaAttention);

/// transformers' LlamaMLP: down_proj(act(gate_proj(x)) * up_proj(x)), act silu (Gemma: GELU, tanh form).
struct LlamaMlpImpl : torch::nn::Module {
  explicit LlamaMlpImpl(const LlamaOptions& o)
      : kernel(o.kernel), activation(o.activation),
        gate_proj(register_module("gate_proj", detail::llama_linear(o.hidden, o.intermediate, o.mlp_bias))),
        up_proj(register_module("up_proj", detail::llama_linear(o.hidden, o.intermediate, o.mlp_bias))),
        down_proj(register_module("down_proj", detail::llama_linear(o.intermediate, o.hidden, o.mlp_bias))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto [gate, up] = nn::shared_input_linears<2>({gate_proj.get(), up_proj.get()}, x, kernel.shared_input);
    return down_proj((activation == GateActivation::Silu ? at::silu(gate) : at::gelu(gate, "tanh")) * up);
  }
  KernelOptions kernel;
  GateActivation activation;
  nn::Linear gate_proj, up_proj, down_proj;
};
TORCH_MODULE(LlamaMlp);

/// transformers' LlamaDecoderLayer: x + attention(norm(x)), then + mlp(norm(.)). With
/// sandwich_norms (Gemma3DecoderLayer): x + post_attention_layernorm(attention(input_layernorm(x))),
/// then + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(.))).
struct LlamaDecoderLayerImpl : torch::nn::Module {
  explicit LlamaDecoderLayerImpl(const LlamaOptions& o)
      : self_attn(register_module("self_attn", LlamaAttention(o))), mlp(register_module("mlp", LlamaMlp(o))),
        input_layernorm(register_module("input_layernorm", norm(o))),
        post_attention_layernorm(register_module("post_attention_layernorm", norm(o))) {
    if (o.sandwich_norms) {
      pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", norm(o));
      post_feedforward_layernorm = register_module("post_feedforward_layernorm", norm(o));
    }
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, LlamaKvCache* cache = nullptr, std::size_t layer = 0) {
    at::Tensor h = self_attn->forward(input_layernorm(x), cos, sin, mask, cache, layer);
    if (pre_feedforward_layernorm) {
      h = x + post_attention_layernorm(h).to(x.scalar_type());
      return h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))).to(h.scalar_type());
    }
    h = x + h.to(x.scalar_type());  // under autocast the branch is bf16 and the stream fp32
    return h + mlp(post_attention_layernorm(h)).to(h.scalar_type());
  }
  static nn::RmsNorm norm(const LlamaOptions& o) {
    return nn::RmsNorm(o.hidden, o.rms_norm_eps, o.kernel.row_kernels, o.kernel.isa, o.norm_unit_offset);
  }
  LlamaAttention self_attn;
  LlamaMlp mlp;
  nn::RmsNorm input_layernorm, post_attention_layernorm;
  nn::RmsNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};  ///< with sandwich_norms
};
TORCH_MODULE(LlamaDecoderLayer);

/// transformers' LlamaModel: embed_tokens, the decoder layers (checkpointable blocks,
/// memory::Checkpoint), norm. forward(input) -> the last hidden states [B, T, hidden].
struct LlamaModelImpl : torch::nn::Module, nn::CheckpointableBlocks {
  explicit LlamaModelImpl(const LlamaOptions& o)
      : embed_tokens(register_module("embed_tokens", torch::nn::Embedding(o.vocab_size, o.hidden))),
        layers(register_module("layers", torch::nn::ModuleList())),
        norm(register_module("norm", LlamaDecoderLayerImpl::norm(o))),
        window_(o.sliding_window),
        embed_scale_(o.scale_embeddings ? std::sqrt(static_cast<double>(o.hidden)) : 0.0),
        inv_freq_(rope_inverse_frequencies(o)),
        local_inv_freq_(o.any_sliding() ? rope_inverse_frequencies(o, /*local=*/true) : at::Tensor()) {
    for (std::int64_t i = 0; i < o.layers; ++i) {
      layers->push_back(LlamaDecoderLayer(o));
      sliding_.push_back(o.is_sliding(static_cast<std::size_t>(i)));
    }
  }

  /// input: ids [B, T]; [B, 2, T] ids and attention_mask (0 on padding); or [B, 3, T] ids,
  /// attention_mask and position_ids, where the positions start again at 0 for every document
  /// of a packed row (data::pack_sequences): a token attends only to earlier tokens of its own
  /// document, which transformers' masks compute from the same position_ids (a new document
  /// where a position is not the one before plus 1).
  torch::Tensor forward(const torch::Tensor& input) {
    check(!input.is_floating_point(), "models::Llama: the input must hold integer token ids, got ",
          at::toString(input.scalar_type()));
    check(input.dim() == 2 || (input.dim() == 3 && (input.size(1) == 2 || input.size(1) == 3)),
          "models::Llama: the input must be ids [B, T], [B, 2, T] (ids, attention_mask) or [B, 3, T] (ids, "
          "attention_mask, position_ids), got ", input.sizes());
    const at::Tensor ids = input.dim() == 2 ? input : input.select(1, 0);
    const auto B = ids.size(0), T = ids.size(1);
    at::Tensor mask;  // bool [B, 1, T, T]; left out when nothing is padding (the causal kernels)
    const bool packed = input.dim() == 3 && input.size(1) == 3;
    if (input.dim() == 3) {
      const at::Tensor kept = input.select(1, 1).ne(0);
      if (packed || !kept.all().item<bool>()) {
        mask = at::ones({T, T}, kept.options()).tril().logical_and(kept.view({B, 1, 1, T}));
        if (packed) {
          const at::Tensor positions = input.select(1, 2);
          const at::Tensor starts = at::cat({at::ones({B, 1}, kept.options()),
                                             positions.slice(1, 1).sub(positions.slice(1, 0, T - 1)).ne(1)}, 1);
          const at::Tensor document = starts.to(at::kLong).cumsum(1);
          mask = mask.logical_and(document.view({B, 1, T, 1}).eq(document.view({B, 1, 1, T})));
        }
        // A query that sees no token (a row of left padding) attends to itself: its output is
        // never read, and a row with nothing to attend would be NaN.
        mask = mask.logical_or(at::eye(T, kept.options()));
      }
    }
    const auto [global, local] =
        attention_inputs(packed ? input.select(1, 2) : at::arange(T, ids.options()), mask, 0, T, ids.options());
    at::Tensor h = embed(ids);
    for (std::size_t i = 0; i < layers->size(); ++i) {
      auto& block = *layers[i]->as<LlamaDecoderLayerImpl>();
      // By value: a checkpointed block runs again in the backward, after this frame is gone.
      h = run_block(static_cast<std::int64_t>(i), block, h, [b = &block, in = sliding_[i] ? local : global](
                                                                const at::Tensor& x) {
        return b->forward(x, in.cos, in.sin, in.mask);
      });
    }
    return norm(h);
  }
  /// The hidden states of new tokens ids [B, T] after those in `cache` (which takes their keys
  /// and values): generation's step. No padding, no checkpointing.
  torch::Tensor forward_cached(const torch::Tensor& ids, LlamaKvCache& cache) {
    const auto T = ids.size(1), start = cache.length;
    check(start + T <= cache.capacity, "models::Llama: ", start + T, " tokens do not fit the cache's capacity of ",
          cache.capacity);
    cache.keys.resize(layers->size());
    cache.values.resize(layers->size());
    // New token i sees every stored token and the new ones up to itself; one new token sees
    // everything (no mask: the attention then attends to all that is stored).
    at::Tensor mask;
    if (start > 0 && T > 1)
      mask = at::ones({T, start + T}, ids.options().dtype(at::kBool)).tril(start).view({1, 1, T, start + T});
    const auto [global, local] =
        attention_inputs(at::arange(start, start + T, ids.options()), mask, start, T, ids.options());
    at::Tensor h = embed(ids);
    for (std::size_t i = 0; i < layers->size(); ++i) {
      const auto& in = sliding_[i] ? local : global;
      h = layer(i).forward(h, in.cos, in.sin, in.mask, &cache, i);
    }
    cache.length += T;
    return norm(h);
  }

  /// Decoder layer i (transformers: model.layers[i]).
  LlamaDecoderLayerImpl& layer(std::size_t i) { return *layers[i]->as<LlamaDecoderLayerImpl>(); }

  torch::nn::Embedding embed_tokens;
  torch::nn::ModuleList layers;
  nn::RmsNorm norm;

private:
  /// cos and sin of `positions`: [T, head_dim] for positions [T], and [B, 1, T, head_dim] (one
  /// per sequence, broadcast over the heads) for positions [B, T].
  static std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& positions, const at::Tensor& inv_freq) {
    const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq.to(positions.device());
    at::Tensor angles = at::cat({freqs, freqs}, -1);
    if (positions.dim() == 2) angles = angles.unsqueeze(1);
    return {angles.cos(), angles.sin()};
  }

  /// What a layer's attention reads: the rotary cos and sin of the positions, and the mask.
  struct AttentionInputs {
    at::Tensor cos, sin, mask;
  };
  /// The global layers' inputs and the sliding layers' (their rope base and window; the same as
  /// the global ones in a model without sliding layers), for T queries at `positions` after
  /// `start` cached tokens, `mask` the global one (undefined: causal).
  std::pair<AttentionInputs, AttentionInputs> attention_inputs(const at::Tensor& positions, const at::Tensor& mask,
                                                               std::int64_t start, std::int64_t T,
                                                               const at::TensorOptions& ids) const {
    auto [cos, sin] = rotary(positions, inv_freq_);
    AttentionInputs global{cos, sin, mask}, local = global;
    if (local_inv_freq_.defined()) {
      std::tie(local.cos, local.sin) = rotary(positions, local_inv_freq_);
      local.mask = within_window(mask, start, T, ids);
    }
    return {global, local};
  }

  /// The token embeddings, times sqrt(hidden) in their own dtype where the model scales them
  /// (Gemma's normalizer).
  at::Tensor embed(const at::Tensor& ids) {
    at::Tensor h = embed_tokens(ids);
    if (embed_scale_ > 0) h = h * at::scalar_tensor(embed_scale_, h.options());
    return h;
  }

  /// The mask of a sliding layer for T queries at positions start.. over start + T keys: `mask`
  /// (undefined: causal) and each query seeing only the keys less than sliding_window behind it
  /// (transformers' sliding_window_mask_function). Undefined where the window hides nothing.
  at::Tensor within_window(const at::Tensor& mask, std::int64_t start, std::int64_t T, const at::TensorOptions& ids) const {
    const std::int64_t keys = start + T;
    if (keys <= window_) return mask;
    const at::Tensor q = at::arange(start, keys, ids).view({T, 1}), k = at::arange(0, keys, ids).view({1, keys});
    at::Tensor band = k.le(q).logical_and(q.sub(k).lt(window_)).view({1, 1, T, keys});
    return mask.defined() ? mask.logical_and(band) : band;
  }

  std::vector<bool> sliding_;  // per layer: whether it is a sliding layer
  std::int64_t window_;
  double embed_scale_;    // 0: none
  at::Tensor inv_freq_;   // not a buffer: transformers does not save it either
  at::Tensor local_inv_freq_;  // the sliding layers'; undefined without them
};
TORCH_MODULE(LlamaModel);

/// transformers' LlamaForCausalLM: the model and the LM head. forward(input) -> logits
/// [B, T, vocab]; hidden(input) -> the hidden states the head reads.
class LlamaImpl : public torch::nn::Module {
public:
  /// Its decoder layers can be checkpointed (memory::Checkpoint).
  static constexpr bool has_checkpointable_blocks = true;

  explicit LlamaImpl(LlamaOptions options = {})
      : options_((options.validate(), std::move(options))), model(register_module("model", LlamaModel(options_))) {
    if (!options_.tie_word_embeddings)
      lm_head = register_module("lm_head", detail::llama_linear(options_.hidden, options_.vocab_size, false));
    initialize();
  }

  /// The logits [B, T, vocab]; the hidden states [B, T, hidden] instead while output_hidden is
  /// set (for loss::fused_causal_lm, which applies the head chunk by chunk).
  torch::Tensor forward(const torch::Tensor& input) { return output_hidden ? model(input) : logits(model(input)); }
  torch::Tensor hidden(const torch::Tensor& input) { return model(input); }
  /// The LM head over hidden states [..., hidden] -> [..., vocab].
  torch::Tensor logits(const torch::Tensor& hidden_states) {
    if (lm_head) return lm_head(hidden_states);
    return torch::nn::functional::linear(hidden_states, model->embed_tokens->weight);
  }
  /// An empty cache for sequences of up to `capacity` tokens (its tensors are made on first use,
  /// in the batch size, dtype and device of the keys).
  static LlamaKvCache cache(std::int64_t capacity) { return {.capacity = capacity}; }
  /// The logits of new tokens ids [B, T] after those in `cache` (generation's step).
  torch::Tensor forward_cached(const torch::Tensor& ids, LlamaKvCache& cache) {
    return logits(model->forward_cached(ids, cache));
  }
  /// The head's weight [vocab, hidden]: lm_head's, or the tied embeddings.
  const at::Tensor& head_weight() const { return lm_head ? lm_head->weight : model->embed_tokens->weight; }

  const LlamaOptions& options() const { return options_; }

  /// transformers' _init_weights: Linear and Embedding weights normal(0, initializer_range),
  /// biases 0, RMSNorm 1. Loading a checkpoint overwrites them.
  void initialize() { ftopt::detail::init_like_transformers(*this, options_.initializer_range); }

private:
  LlamaOptions options_;

public:
  LlamaModel model;
  nn::Linear lm_head{nullptr};
  bool output_hidden = false;  ///< forward returns the hidden states, not the logits
};

/// The module handle, constructible from braced options.
class Llama : public torch::nn::ModuleHolder<LlamaImpl> {
public:
  using torch::nn::ModuleHolder<LlamaImpl>::ModuleHolder;
  Llama(LlamaOptions options)  // NOLINT: implicit, so `Llama model({...})` reads well
      : ModuleHolder(std::make_shared<LlamaImpl>(std::move(options))) {}
};

} // namespace ftopt::models
