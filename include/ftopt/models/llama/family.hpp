#pragma once
/// The Llama family (transformers' LlamaForCausalLM; SmolLM2, Llama 2 and 3): RMSNorm, SwiGLU,
/// rotary positions with Llama 3's frequency scaling, `attention_bias` on all four projections.
/// llama.cpp's converter interleaves each head's q and k rows; the loader puts them back.

#include <array>
#include <string>
#include <string_view>

#include <ftopt/error.hpp>
#include <ftopt/models/decoder_family.hpp>
#include <ftopt/weights/gguf.hpp>

namespace ftopt::models::families {

struct Llama {
  static constexpr std::string_view name = "llama";
  static constexpr std::string_view hf_class = "LlamaForCausalLM";
  static constexpr std::array<std::string_view, 1> model_types = {"llama"};
  static constexpr std::string_view gguf_architecture = "llama";
  static constexpr auto gguf_layer_tensors = llama_layer_tensors;
  static constexpr GgufRows gguf_rows = GgufRows::InterleavedRotary;
  static constexpr auto lora_targets = decoder_projections;

  template <class Json, class Get>
  static void read_config(const Json& c, const Get& get, const std::string& where, LlamaOptions& o) {
    read_decoder_config(c, get, /*tied_by_default=*/false, o);
    require_silu(c, get, where);
    read_shared_rope(c, get, where, o);
    o.qkv_bias = o.o_bias = get(c, "attention_bias", false);
    o.mlp_bias = get(c, "mlp_bias", false);
  }

  static void read_gguf(const weights::Gguf&, LlamaOptions&) {}

  static bool holds(const LlamaOptions& o) {
    return !has_gemma_parts(o) && !o.any_sliding() && !(o.qkv_bias && !o.o_bias);
  }

  template <class Json>
  static void write_config(const LlamaOptions& o, Json& c) {
    check(!o.o_bias || o.qkv_bias, "models::save_llama: an o_proj bias without q/k/v biases is neither "
          "LlamaConfig's attention_bias nor Qwen2's");
    write_decoder_config(o, hf_class, name, c);
    c["hidden_act"] = "silu";
    c["attention_bias"] = o.qkv_bias;
    c["mlp_bias"] = o.mlp_bias;
    c["rope_parameters"] = rope_json<Json>(o.rope_theta, o.rope_scaling);
  }
};

} // namespace ftopt::models::families
