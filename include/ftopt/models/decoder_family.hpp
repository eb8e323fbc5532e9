#pragma once
/// What a decoder family is to ftopt: the parts of models::Llama (LlamaOptions) its checkpoints
/// switch on, and how its two kinds of files name things. A family is one struct in its own
/// folder (models/llama, models/qwen2, models/mistral, models/gemma3) and one line of the registry
/// (models/decoder_families.hpp); the loaders and save_llama ask the registry, never the
/// family's name. A family struct has:
///
///   name, hf_class          "gemma3", "Gemma3ForCausalLM"
///   model_types             config.json's model_type values it reads ({"gemma3_text"})
///   gguf_architecture       general.architecture it reads ("" for none of its own: llama.cpp
///                           converts Mistral as "llama")
///   gguf_layer_tensors      llama.cpp's tensor table for one layer: {"attn_q", "self_attn.q_proj"},
///                           data, as llama.cpp's llama-arch.cpp keeps it per architecture
///   gguf_rows               how the converter changed tensors on the way into the file:
///                           GgufRows::InterleavedRotary (llama: q/k rows of each head
///                           interleaved) or GgufRows::NormsPlusOne (Gemma: every norm stored as 1 + w)
///   lora_targets            the projections PEFT's recipes target for it
///   read_config(c, get, where, o)  its config.json (the shared fields through read_decoder_config)
///   read_gguf(file, o)      its GGUF metadata beyond the shared keys
///   write_config(o, c)      config.json as transformers writes it for the family (errors name
///                           the options its config cannot hold)
///   holds(o)                whether options describe one of its models (save_llama asks)
///
/// The SwiGLU families derive what they share from SiluDecoderFamily (below).
/// docs/architecture.md ("Add a model family") walks through adding one.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <ftopt/error.hpp>
#include <ftopt/models/llama.hpp>
#include <ftopt/weights/gguf.hpp>

namespace ftopt::models {

/// One row of a GGUF tensor table: llama.cpp's name for a layer's tensor (blk.N.<gguf>.weight)
/// and transformers' (model.layers.N.<hf>.weight).
struct GgufTensorName {
  std::string_view gguf;
  std::string_view hf;
};

/// What llama.cpp's converter did to a family's tensors on the way into a GGUF file.
enum class GgufRows {
  AsIs,
  InterleavedRotary,  ///< q and k rows of each head interleaved (convert_hf_to_gguf.py, LlamaModel.permute)
  NormsPlusOne,       ///< every RMSNorm weight stored as 1 + w (Gemma)
};

/// llama.cpp's table of a llama layer's tensors (LLM_ARCH_LLAMA, also qwen2's without the norms
/// Gemma adds).
inline constexpr std::array<GgufTensorName, 9> llama_layer_tensors = {{
    {"attn_norm", "input_layernorm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
}};

/// The seven projections of a decoder layer: the LoRA targets of PEFT's and torchtune's recipes.
inline constexpr std::array<std::string_view, 7> decoder_projections = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

/// The rope of one rope_parameters object (transformers 5) or of rope_theta + rope_scaling (older
/// files): its base and Llama 3's scaling where rope_type is "llama3"; `key` names it in errors.
template <class Json, class Get>
void read_rope(const Json& r, const Get& get, const std::string& where, const std::string& key, double& theta,
               std::optional<Llama3RopeScaling>& scaling) {
  check(r.is_object(), where, ": ", key, " is ", r.dump(), ", not an object");
  theta = get(r, "rope_theta", theta);
  const std::string type = get(r, "rope_type", get(r, "type", std::string("default")));
  if (type == "llama3") {
    Llama3RopeScaling s;
    s.factor = get(r, "factor", s.factor);
    s.low_freq_factor = get(r, "low_freq_factor", s.low_freq_factor);
    s.high_freq_factor = get(r, "high_freq_factor", s.high_freq_factor);
    s.original_max_position_embeddings = get(r, "original_max_position_embeddings", s.original_max_position_embeddings);
    scaling = s;
  } else {
    check(type == "default", where, ": ", key, ".rope_type is '", type, "'; models::Llama has 'default' and 'llama3'");
  }
}

/// A rope_parameters object as transformers 5 writes it.
template <class Json>
Json rope_json(double theta, const std::optional<Llama3RopeScaling>& scaling) {
  Json rope = {{"rope_type", scaling ? "llama3" : "default"}, {"rope_theta", theta}};
  if (scaling) {
    rope["factor"] = scaling->factor;
    rope["low_freq_factor"] = scaling->low_freq_factor;
    rope["high_freq_factor"] = scaling->high_freq_factor;
    rope["original_max_position_embeddings"] = scaling->original_max_position_embeddings;
  }
  return rope;
}

/// config.json fields every decoder family shares, as transformers' configs name them;
/// `tied_by_default`: tie_word_embeddings where the file leaves it out (the family's config class
/// default).
template <class Json, class Get>
void read_decoder_config(const Json& c, const Get& get, bool tied_by_default, LlamaOptions& o) {
  o.vocab_size = get(c, "vocab_size", o.vocab_size);
  o.hidden = get(c, "hidden_size", o.hidden);
  o.intermediate = get(c, "intermediate_size", o.intermediate);
  o.layers = get(c, "num_hidden_layers", o.layers);
  o.heads = get(c, "num_attention_heads", o.heads);
  o.kv_heads = get(c, "num_key_value_heads", o.heads);
  o.head_dim = get(c, "head_dim", std::int64_t{0});
  o.max_position_embeddings = get(c, "max_position_embeddings", o.max_position_embeddings);
  o.rms_norm_eps = get(c, "rms_norm_eps", o.rms_norm_eps);
  o.tie_word_embeddings = get(c, "tie_word_embeddings", tied_by_default);
  o.initializer_range = get(c, "initializer_range", o.initializer_range);
}

/// The same fields written back, in the order transformers writes them.
template <class Json>
void write_decoder_config(const LlamaOptions& o, std::string_view hf_class, std::string_view model_type, Json& c) {
  c["architectures"] = {std::string(hf_class)};
  c["model_type"] = std::string(model_type);
  c["vocab_size"] = o.vocab_size;
  c["hidden_size"] = o.hidden;
  c["intermediate_size"] = o.intermediate;
  c["num_hidden_layers"] = o.layers;
  c["num_attention_heads"] = o.heads;
  c["num_key_value_heads"] = o.kv_heads;
  c["head_dim"] = o.dim_of_head();
  c["max_position_embeddings"] = o.max_position_embeddings;
  c["rms_norm_eps"] = o.rms_norm_eps;
  c["initializer_range"] = o.initializer_range;
  c["tie_word_embeddings"] = o.tie_word_embeddings;
}

/// Whether options switch on any of Gemma's parts (none of the SiLU families has them).
inline bool has_gemma_parts(const LlamaOptions& o) {
  return o.norm_unit_offset || o.qk_norm || o.sandwich_norms || o.scale_embeddings ||
         o.activation != GateActivation::Silu || o.query_pre_attn_scalar > 0;
}

/// What the SwiGLU families (Llama, Mistral, Qwen2) share, for them to derive from: llama.cpp's
/// llama table, the seven projections as LoRA targets, no GGUF keys of their own, and the
/// config.json fields they read and write alike (hidden_act silu, one rope for every layer).
struct SiluDecoderFamily {
  static constexpr auto gguf_layer_tensors = llama_layer_tensors;
  static constexpr auto lora_targets = decoder_projections;
  static void read_gguf(const weights::Gguf&, LlamaOptions&) {}

  template <class Json, class Get>
  static void read_silu_config(const Json& c, const Get& get, const std::string& where, LlamaOptions& o) {
    read_decoder_config(c, get, /*tied_by_default=*/false, o);
    const std::string act = get(c, "hidden_act", std::string("silu"));
    check(act == "silu", where, ": hidden_act is '", act, "'; models::Llama's MLP is SwiGLU (silu)");
    o.rope_theta = get(c, "rope_theta", 10000.0);
    for (const char* key : {"rope_parameters", "rope_scaling"})
      if (c.contains(key) && !c[key].is_null()) return read_rope(c[key], get, where, key, o.rope_theta, o.rope_scaling);
  }

  template <class Json>
  static void write_silu_config(const LlamaOptions& o, std::string_view hf_class, std::string_view model_type,
                                Json& c) {
    write_decoder_config(o, hf_class, model_type, c);
    c["hidden_act"] = "silu";
    c["rope_parameters"] = rope_json<Json>(o.rope_theta, o.rope_scaling);
  }
};

} // namespace ftopt::models
