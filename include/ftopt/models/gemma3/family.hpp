#pragma once
/// The Gemma 3 family (transformers' Gemma3ForCausalLM, config model_type "gemma3_text"): RMSNorm
/// scaling by 1 + w, q_norm and k_norm, a norm after attention and one on each side of the MLP,
/// GELU-tanh gating, embeddings times sqrt(hidden), attention scaled by query_pre_attn_scalar, and
/// sliding-window layers (their own rope base) between global ones. llama.cpp stores each norm
/// as 1 + w; the loader takes the 1 off, as transformers' Gemma2TensorProcessor does.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <ftopt/error.hpp>
#include <ftopt/models/decoder_family.hpp>
#include <ftopt/weights/gguf.hpp>

namespace ftopt::models::families {

struct Gemma3 {
  static constexpr std::string_view name = "gemma3";
  static constexpr std::string_view hf_class = "Gemma3ForCausalLM";
  static constexpr std::array<std::string_view, 1> model_types = {"gemma3_text"};
  static constexpr std::string_view gguf_architecture = "gemma3";
  /// llama.cpp's LLM_ARCH_GEMMA3 table: its ffn_norm is the norm before the MLP, and
  /// post_attention_norm the one after attention.
  static constexpr std::array<GgufTensorName, 13> gguf_layer_tensors = {{
      {"attn_norm", "input_layernorm"},
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},
      {"post_attention_norm", "post_attention_layernorm"},
      {"ffn_norm", "pre_feedforward_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
      {"post_ffw_norm", "post_feedforward_layernorm"},
  }};
  static constexpr GgufRows gguf_rows = GgufRows::NormsPlusOne;
  static constexpr auto lora_targets = decoder_projections;
  /// Gemma 3's layer pattern (transformers' sliding_window_pattern, llama.cpp's n_swa_pattern):
  /// every sixth layer global, the others sliding.
  static constexpr std::int64_t global_every = 6;

  static void set_parts(LlamaOptions& o) {
    o.norm_unit_offset = o.qk_norm = o.sandwich_norms = o.scale_embeddings = true;
    o.activation = GateActivation::GeluTanh;
  }
  static void every_sixth_global(LlamaOptions& o, std::int64_t pattern = global_every) {
    o.sliding_layers.clear();
    for (std::int64_t i = 0; i < o.layers; ++i) o.sliding_layers.push_back((i + 1) % pattern != 0);
  }

  template <class Json, class Get>
  static void read_config(const Json& c, const Get& get, const std::string& where, LlamaOptions& o) {
    o.rms_norm_eps = 1e-6;
    o.max_position_embeddings = 131072;
    read_decoder_config(c, get, /*tied_by_default=*/true, o);
    set_parts(o);
    const std::string act = get(c, "hidden_activation", get(c, "hidden_act", std::string("gelu_pytorch_tanh")));
    check(act == "gelu_pytorch_tanh", where, ": hidden_activation is '", act,
          "'; Gemma 3's MLP gates with GELU's tanh form (gelu_pytorch_tanh)");
    o.query_pre_attn_scalar = get(c, "query_pre_attn_scalar", std::int64_t{256});
    o.qkv_bias = o.o_bias = get(c, "attention_bias", false);
    for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"})
      check(!c.contains(key) || c[key].is_null(), where, ": ", key, " is ", c.contains(key) ? c[key].dump() : "",
            "; Gemma 3 has none, and models::Llama does not cap logits");
    check(!get(c, "use_bidirectional_attention", false), where,
          ": use_bidirectional_attention is true; models::Llama's attention is causal");
    o.sliding_window = get(c, "sliding_window", std::int64_t{4096});
    if (c.contains("layer_types") && !c["layer_types"].is_null()) {
      check(c["layer_types"].is_array(), where, ": layer_types is ", c["layer_types"].dump(), ", not a list");
      o.sliding_layers.clear();
      for (const auto& type : c["layer_types"]) {
        const bool sliding = type == "sliding_attention";
        check(sliding || type == "full_attention", where, ": layer_types holds ", type.dump(),
              "; Gemma 3's layers are 'sliding_attention' or 'full_attention'");
        o.sliding_layers.push_back(sliding);
      }
    } else {
      every_sixth_global(o, get(c, "sliding_window_pattern", get(c, "_sliding_window_pattern", global_every)));
    }
    // transformers 5: rope_parameters per layer type; older files rope_theta, rope_local_base_freq.
    o.rope_theta = get(c, "rope_theta", 1000000.0);
    o.rope_local_theta = get(c, "rope_local_base_freq", 10000.0);
    if (c.contains("rope_parameters") && !c["rope_parameters"].is_null()) {
      const Json& r = c["rope_parameters"];
      check(r.is_object() && r.contains("full_attention") && r.contains("sliding_attention"), where,
            ": rope_parameters is ", r.dump(), ", not one rope for full_attention and one for sliding_attention");
      read_rope(r["full_attention"], get, where, "rope_parameters.full_attention", o.rope_theta, o.rope_scaling);
      std::optional<Llama3RopeScaling> local_scaling;
      read_rope(r["sliding_attention"], get, where, "rope_parameters.sliding_attention", o.rope_local_theta,
                local_scaling);
      check(!local_scaling, where, ": rope_parameters.sliding_attention is scaled; Gemma 3's local rope is not");
    } else if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {
      read_rope(c["rope_scaling"], get, where, "rope_scaling", o.rope_theta, o.rope_scaling);
    }
  }

  /// The file's sliding window with Gemma 3's layer pattern and local rope base (10,000), as
  /// llama.cpp's and transformers' readers set them.
  static void read_gguf(const weights::Gguf& file, LlamaOptions& o) {
    set_parts(o);
    o.sliding_window = file.integer("gemma3.attention.sliding_window");
    every_sixth_global(o);
    o.rope_local_theta = 10000.0;
    if (file.has("gemma3.rope.scaling.type"))
      check(file.string("gemma3.rope.scaling.type") == "none", "models::Llama: ", file.path().string(),
            ": gemma3.rope.scaling.type is '", file.string("gemma3.rope.scaling.type"),
            "'; models::Llama reads Gemma 3 files without rope scaling");
  }

  static bool holds(const LlamaOptions& o) { return o.norm_unit_offset; }

  template <class Json>
  static void write_config(const LlamaOptions& o, Json& c) {
    check(o.norm_unit_offset && o.qk_norm && o.sandwich_norms && o.scale_embeddings &&
              o.activation == GateActivation::GeluTanh,
          "models::save_llama: 1 + w norms are Gemma 3's, whose config also has q/k norms, sandwich norms, scaled "
          "embeddings and GELU-tanh gating; these options lack some");
    check(o.qkv_bias == o.o_bias && !o.mlp_bias, "models::save_llama: Gemma 3's attention_bias is on all four "
          "projections or none and its MLP has no biases; the options differ");
    write_decoder_config(o, hf_class, "gemma3_text", c);
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["query_pre_attn_scalar"] = o.query_pre_attn_scalar > 0 ? o.query_pre_attn_scalar : o.dim_of_head();
    c["attention_bias"] = o.qkv_bias;
    c["sliding_window"] = o.sliding_window;
    Json types = Json::array();
    for (std::int64_t i = 0; i < o.layers; ++i)
      types.push_back(o.is_sliding(static_cast<std::size_t>(i)) ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    c["rope_parameters"] = {{"full_attention", rope_json<Json>(o.rope_theta, o.rope_scaling)},
                            {"sliding_attention", rope_json<Json>(o.rope_local_theta, std::nullopt)}};
    c["final_logit_softcapping"] = nullptr;
    c["attn_logit_softcapping"] = nullptr;
    c["use_bidirectional_attention"] = false;
  }
};

} // namespace ftopt::models::families
