#pragma once
/// The Mistral family (transformers' MistralForCausalLM): Llama's layers without biases, every
/// layer attending to the last `sliding_window` tokens where the config gives one (Mistral 7B
/// v0.1; later versions set it to null and attend to all). llama.cpp converts Mistral's
/// checkpoints as architecture "llama", without the window, so a GGUF file loads as Llama.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <ftopt/error.hpp>
#include <ftopt/models/decoder_family.hpp>

namespace ftopt::models::families {

struct Mistral : SiluDecoderFamily {
  static constexpr std::string_view name = "mistral";
  static constexpr std::string_view hf_class = "MistralForCausalLM";
  static constexpr std::array<std::string_view, 1> model_types = {"mistral"};
  static constexpr std::string_view gguf_architecture = "";
  static constexpr GgufRows gguf_rows = GgufRows::InterleavedRotary;

  template <class Json, class Get>
  static void read_config(const Json& c, const Get& get, const std::string& where, LlamaOptions& o) {
    read_silu_config(c, get, where, o);
    o.sliding_window = get(c, "sliding_window", std::int64_t{0});
    if (o.sliding_window > 0) o.sliding_layers.assign(static_cast<std::size_t>(o.layers), true);
  }

  /// Every layer sliding; a Mistral without a window is a Llama and is saved as one.
  static bool holds(const LlamaOptions& o) {
    return !has_gemma_parts(o) && !o.sliding_layers.empty() &&
           std::find(o.sliding_layers.begin(), o.sliding_layers.end(), false) == o.sliding_layers.end();
  }

  template <class Json>
  static void write_config(const LlamaOptions& o, Json& c) {
    check(!o.qkv_bias && !o.o_bias && !o.mlp_bias, "models::save_llama: a sliding window on every layer is "
          "MistralConfig's, whose layers have no biases, but the options have some");
    write_silu_config(o, hf_class, name, c);
    c["sliding_window"] = o.sliding_window;
  }
};

} // namespace ftopt::models::families
