#pragma once
/// The Qwen2 family (transformers' Qwen2ForCausalLM; Qwen2 and Qwen2.5): Llama's layers with
/// biases on q, k and v (not o). Its GGUF rows are as transformers has them.

#include <array>
#include <string>
#include <string_view>

#include <ftopt/error.hpp>
#include <ftopt/models/decoder_family.hpp>

namespace ftopt::models::families {

struct Qwen2 : SiluDecoderFamily {
  static constexpr std::string_view name = "qwen2";
  static constexpr std::string_view hf_class = "Qwen2ForCausalLM";
  static constexpr std::array<std::string_view, 1> model_types = {"qwen2"};
  static constexpr std::string_view gguf_architecture = "qwen2";
  static constexpr GgufRows gguf_rows = GgufRows::AsIs;

  template <class Json, class Get>
  static void read_config(const Json& c, const Get& get, const std::string& where, LlamaOptions& o) {
    read_silu_config(c, get, where, o);
    check(!get(c, "use_sliding_window", false), where, ": use_sliding_window is true; models::Llama reads Qwen2 "
          "checkpoints that attend to every earlier token (use_sliding_window false, as Qwen2.5's are)");
    o.qkv_bias = true;
  }

  static bool holds(const LlamaOptions& o) { return !has_gemma_parts(o) && !o.any_sliding() && o.qkv_bias && !o.o_bias; }

  template <class Json>
  static void write_config(const LlamaOptions& o, Json& c) {
    check(!o.mlp_bias, "models::save_llama: q/k/v biases without o_proj's are Qwen2's, whose MLP has no biases, "
          "but mlp_bias is set");
    write_silu_config(o, hf_class, name, c);
    c["use_sliding_window"] = false;
  }
};

} // namespace ftopt::models::families
