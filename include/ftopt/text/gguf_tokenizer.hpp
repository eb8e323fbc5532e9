#pragma once
/// text::GgufTokenizer: the tokenizer a GGUF file's metadata describes, whichever kind it is
/// (tokenizer.ggml.model "gpt2": text::ByteLevelBpe, as SmolLM2's, Qwen2's and Llama 3's files;
/// "llama": text::SentencePieceBpe, as Gemma's), behind one interface. encode() adds no special
/// token: a chat template writes its own (<bos> in Gemma's), and a plain text needs none.
///
///   const ftopt::text::GgufTokenizer tokenizer(ftopt::weights::Gguf("gemma-3-270m-q4_k_m.gguf"));
///   auto ids = tokenizer.encode(ftopt::text::gemma_chat({{"user", "Hello"}}), "the prompt");

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <ftopt/error.hpp>
#include <ftopt/text/bpe_files.hpp>
#include <ftopt/text/byte_level_bpe.hpp>
#include <ftopt/text/sentencepiece.hpp>
#include <ftopt/weights/gguf.hpp>

namespace ftopt::text {

class GgufTokenizer {
 public:
  explicit GgufTokenizer(const weights::Gguf& file) : impl_(read(file)) {}

  std::vector<std::int64_t> encode(std::string_view text, std::string_view source = {}) const {
    return std::visit(
        [&](const auto& t) {
          if constexpr (std::is_same_v<std::decay_t<decltype(t)>, SentencePieceBpe>) return t.encode(text, source, false);
          else return t.encode(text, source);
        },
        impl_);
  }
  /// The text of `ids`; `skip_special`: without control and added tokens.
  std::string decode(std::span<const std::int64_t> ids, bool skip_special = false) const {
    return std::visit([&](const auto& t) { return t.decode(ids, skip_special); }, impl_);
  }
  std::int64_t id_of(std::string_view token) const {
    return std::visit([&](const auto& t) { return t.id_of(token); }, impl_);
  }
  std::int64_t size() const { return std::visit([](const auto& t) { return t.size(); }, impl_); }
  std::int64_t bos_id() const { return std::visit([](const auto& t) { return t.bos_id(); }, impl_); }
  std::int64_t eos_id() const { return std::visit([](const auto& t) { return t.eos_id(); }, impl_); }
  std::int64_t pad_id() const { return std::visit([](const auto& t) { return t.pad_id(); }, impl_); }
  /// Whether the vocabulary puts <bos> before a text (tokenizer.ggml.add_bos_token of a
  /// SentencePiece file, as Gemma's; byte-level BPE files here add none).
  bool adds_bos() const {
    const auto* sp = std::get_if<SentencePieceBpe>(&impl_);
    return sp != nullptr && sp->vocabulary().add_bos;
  }

 private:
  static std::variant<ByteLevelBpe, SentencePieceBpe> read(const weights::Gguf& file) {
    const std::string model = file.has("tokenizer.ggml.model") ? file.string("tokenizer.ggml.model") : "";
    if (model == "llama") return sentencepiece_from_gguf(file);
    check(model == "gpt2", "text::GgufTokenizer: ", file.path().string(), ": tokenizer.ggml.model is '", model,
          "'; ftopt reads 'gpt2' (byte-level BPE) and 'llama' (SentencePiece)");
    return bpe_from_gguf(file);
  }
  std::variant<ByteLevelBpe, SentencePieceBpe> impl_;
};

} // namespace ftopt::text
