#pragma once
/// The Llama family (transformers' LlamaForCausalLM; SmolLM2, Llama 2 and 3): RMSNorm, SwiGLU,
/// rotary positions with Llama 3's frequency scaling, `attention_bias` on all four projections.
/// llama.cpp's converter interleaves each head's q and k rows; the loader puts them back.

#include <array>
#include <string>
#include <string_view>

#include <ftopt/error.hpp>
#include <ftopt/models/decoder_family.hpp>

namespace ftopt::models::families {

struct Llama : SiluDecoderFamily {
  static constexpr std::string_view name = "llama";
  static constexpr std::string_view hf_class = "LlamaForCausalLM";
  static constexpr std::array<std::string_view, 1> model_types = {"llama"};
  static constexpr std::string_view gguf_architecture = "llama";
  static constexpr GgufRows gguf_rows = GgufRows::InterleavedRotary;

  template <class Json, class Get>
  static void read_config(const Json& c, const Get& get, const std::string& where, LlamaOptions& o) {
    read_silu_config(c, get, where, o);
    o.qkv_bias = o.o_bias = get(c, "attention_bias", false);
    o.mlp_bias = get(c, "mlp_bias", false);
  }

  static bool holds(const LlamaOptions& o) {
    return !has_gemma_parts(o) && !o.any_sliding() && !(o.qkv_bias && !o.o_bias);
  }

  template <class Json>
  static void write_config(const LlamaOptions& o, Json& c) {
    check(!o.o_bias || o.qkv_bias, "models::save_llama: an o_proj bias without q/k/v biases is neither "
          "LlamaConfig's attention_bias nor Qwen2's");
    write_silu_config(o, hf_class, name, c);
    c["attention_bias"] = o.qkv_bias;
    c["mlp_bias"] = o.mlp_bias;
  }
};

} // namespace ftopt::models::families
