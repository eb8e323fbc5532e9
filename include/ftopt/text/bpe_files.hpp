#pragma once
/// text::ByteLevelBpe from the files models ship it in:
///   - a GGUF file's metadata, as llama.cpp writes it: tokenizer.ggml.model "gpt2",
///     tokenizer.ggml.{tokens, merges, token_type, bos_token_id, eos_token_id, padding_token_id},
///     and tokenizer.ggml.pre naming the pre-tokenizer (llama.cpp's llama-vocab.cpp: "smollm",
///     "starcoder", "refact", "command-r", "codeshell", "exaone" and "minerva" split digits one by
///     one before GPT-2's pattern; "gpt-2", "phi-2", "jina-es" and "jina-de" use the pattern alone).
///     Tokens typed control (3) or user-defined (4) are added tokens, matched whole.
///     "llama-bpe" (Llama 3) and "qwen2" split with their own patterns; Llama 3's words that are
///     tokens skip the merges (ignore_merges), as llama.cpp does.
///   - a Hugging Face tokenizer.json (model.type "BPE", pre_tokenizer ByteLevel, Digits with
///     individual_digits then ByteLevel, or a Split with Llama 3's or Qwen2's pattern then
///     ByteLevel without its regex; model.ignore_merges; no normalizer or NFC), its added_tokens matched
///     whole; bos/eos/pad from tokenizer_config.json beside it, where there is one.
/// Anything else (a SentencePiece vocabulary, another pattern, another normalizer) is an error naming
/// the file and the value.
///
///   auto bpe = ftopt::text::bpe_from_gguf(ftopt::weights::Gguf("SmolLM2-135M-Instruct.Q4_1.gguf"));
///   auto bpe2 = ftopt::text::bpe_from_tokenizer_json("SmolLM2-135M-Instruct/tokenizer.json");  // uses JSON

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/text/byte_level_bpe.hpp>
#include <ftopt/weights/gguf.hpp>

namespace ftopt::text {

/// The pre-tokenizer a GGUF's tokenizer.ggml.pre names; an error for one ftopt does not have.
inline BpePreTokenizer bpe_pre_tokenizer_of_gguf(const std::string& pre, const std::string& where) {
  for (const char* name : {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"})
    if (pre == name) return BpePreTokenizer::Gpt2Digits;
  for (const char* name : {"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de"})
    if (pre == name) return BpePreTokenizer::Gpt2;
  for (const char* name : {"llama-bpe", "llama3", "llama-v3"})
    if (pre == name) return BpePreTokenizer::Llama3;
  if (pre == "qwen2") return BpePreTokenizer::Qwen2;
  fail(where, ": tokenizer.ggml.pre is '", pre, "'; ftopt's byte-level BPE splits text as GPT-2 does, with or "
       "without single digits (smollm, starcoder, refact, command-r, codeshell, exaone, minerva, gpt-2, phi-2, "
       "jina-es, jina-de), or as Llama 3 (llama-bpe, llama3, llama-v3) or Qwen2 (qwen2) do");
}

/// The tokenizer of a GGUF file.
inline ByteLevelBpe bpe_from_gguf(const weights::Gguf& file) {
  const std::string where = "text::ByteLevelBpe: " + file.path().string();
  const std::string model = file.string("tokenizer.ggml.model");
  check(model == "gpt2", where, ": tokenizer.ggml.model is '", model, "', not 'gpt2' (byte-level BPE)",
        model == "llama" ? "; read a SentencePiece vocabulary with text::sentencepiece_from_gguf (or text::GgufTokenizer)" : "");
  BpeVocabulary v;
  v.tokens = file.strings("tokenizer.ggml.tokens");
  v.merges = file.strings("tokenizer.ggml.merges");
  v.pre_tokenizer = bpe_pre_tokenizer_of_gguf(file.has("tokenizer.ggml.pre") ? file.string("tokenizer.ggml.pre")
                                                                              : std::string("gpt2"), where);
  v.ignore_merges = v.pre_tokenizer == BpePreTokenizer::Llama3;  // as llama.cpp's llama-vocab.cpp
  if (file.has("tokenizer.ggml.token_type")) {
    const auto types = file.integers("tokenizer.ggml.token_type");
    check(types.size() == v.tokens.size(), where, ": tokenizer.ggml.token_type has ", types.size(), " entries for ",
          v.tokens.size(), " tokens");
    for (std::size_t id = 0; id < types.size(); ++id)
      if (types[id] == 3 || types[id] == 4) v.added.push_back(static_cast<std::int64_t>(id));
  }
  auto id = [&](const char* key) { return file.has(key) ? file.integer(key) : std::int64_t{-1}; };
  v.bos = id("tokenizer.ggml.bos_token_id");
  v.eos = id("tokenizer.ggml.eos_token_id");
  v.pad = id("tokenizer.ggml.padding_token_id");
  return ByteLevelBpe(std::move(v), where);
}

/// The tokenizer of a Hugging Face tokenizer.json (and tokenizer_config.json beside it).
template <class Json = nlohmann::json>
ByteLevelBpe bpe_from_tokenizer_json(const std::filesystem::path& path) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const std::string where = "text::ByteLevelBpe: " + path.string();
  const Json j = ftopt::detail::read_json_file<Json>(path, where);
  BpeVocabulary v;
  try {
    const Json& model = j.at("model");
    const std::string type = model.value("type", std::string());
    check(type == "BPE", where, ": model.type is '", type, "', not 'BPE' (a byte-level BPE tokenizer)");
    const Json& vocab = model.at("vocab");
    check(vocab.is_object(), where, ": model.vocab is not an object");
    // Ids run 0..n-1 over model.vocab and added_tokens together (some files list an added token
    // in both, some only in added_tokens).
    std::size_t n = vocab.size();
    if (j.contains("added_tokens"))
      for (const auto& a : j["added_tokens"])
        if (!vocab.contains(a.at("content").template get<std::string>())) ++n;
    v.tokens.resize(n);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const auto id = it.value().template get<std::int64_t>();
      check(id >= 0 && id < static_cast<std::int64_t>(n) && v.tokens[static_cast<std::size_t>(id)].empty(), where,
            ": model.vocab gives '", it.key(), "' the id ", id, ", outside 0..", n - 1, " or taken");
      v.tokens[static_cast<std::size_t>(id)] = it.key();
    }
    for (const auto& m : model.at("merges"))  // "a b", or ["a", "b"] (tokenizers >= 0.20)
      v.merges.push_back(m.is_string() ? m.template get<std::string>()
                                       : m.at(0).template get<std::string>() + " " + m.at(1).template get<std::string>());
    if (j.contains("added_tokens"))
      for (const auto& a : j["added_tokens"]) {
        const auto id = a.at("id").template get<std::int64_t>();
        const auto content = a.at("content").template get<std::string>();
        check(id >= 0 && id < static_cast<std::int64_t>(n) &&
                  (v.tokens[static_cast<std::size_t>(id)].empty() || v.tokens[static_cast<std::size_t>(id)] == content),
              where, ": added token '", content, "' has id ", id, ", outside 0..", n - 1,
              " or one model.vocab gives another token");
        v.tokens[static_cast<std::size_t>(id)] = content;
        v.added.push_back(id);
      }
    v.ignore_merges = model.contains("ignore_merges") && model["ignore_merges"].is_boolean() &&
                      model["ignore_merges"].template get<bool>();
    // The normalizer: none, or NFC (Qwen2's).
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      v.nfc = j["normalizer"].is_object() && j["normalizer"].value("type", std::string()) == "NFC";
      check(v.nfc, where, ": normalizer ", j["normalizer"].dump().substr(0, 120),
            " is not one ftopt applies (none or NFC)");
    }
    // The pre-tokenizer: ByteLevel, Sequence [Digits(individual_digits), ByteLevel], or Sequence
    // [Split(Llama 3's or Qwen2's pattern, isolated), ByteLevel without its regex].
    const Json& pre = j.at("pre_tokenizer");
    auto byte_level = [&](const Json& p, bool regex) {
      return p.value("type", std::string()) == "ByteLevel" && p.value("use_regex", true) == regex &&
             !p.value("add_prefix_space", false);
    };
    auto split_pattern = [&](const Json& p) -> std::string {
      if (p.value("type", std::string()) != "Split" || p.value("behavior", std::string()) != "Isolated" ||
          p.value("invert", false) || !p.contains("pattern") || !p["pattern"].contains("Regex"))
        return {};
      return p["pattern"]["Regex"].template get<std::string>();
    };
    const bool pair = pre.value("type", std::string()) == "Sequence" && pre.at("pretokenizers").size() == 2;
    if (byte_level(pre, true)) {
      v.pre_tokenizer = BpePreTokenizer::Gpt2;
    } else if (pair && pre["pretokenizers"][0].value("type", std::string()) == "Digits" &&
               pre["pretokenizers"][0].value("individual_digits", false) && byte_level(pre["pretokenizers"][1], true)) {
      v.pre_tokenizer = BpePreTokenizer::Gpt2Digits;
    } else if (pair && split_pattern(pre["pretokenizers"][0]) == llama3_pattern &&
               byte_level(pre["pretokenizers"][1], false)) {
      v.pre_tokenizer = BpePreTokenizer::Llama3;
    } else if (pair && split_pattern(pre["pretokenizers"][0]) == qwen2_pattern &&
               byte_level(pre["pretokenizers"][1], false)) {
      v.pre_tokenizer = BpePreTokenizer::Qwen2;
    } else {
      fail(where, ": pre_tokenizer ", pre.dump().substr(0, 300), " is not one ftopt has (ByteLevel with use_regex "
           "and without add_prefix_space, alone or after Digits with individual_digits; or Llama 3's or Qwen2's "
           "pattern split isolated, then ByteLevel without its regex)");
    }
  } catch (const typename Json::exception& e) {
    fail(where, ": ", e.what());
  }
  for (std::size_t id = 0; id < v.tokens.size(); ++id)
    check(!v.tokens[id].empty(), where, ": no token has the id ", id);
  const auto config = path.parent_path() / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(config)) {
    const Json c = ftopt::detail::read_json_file<Json>(config, "text::ByteLevelBpe: " + config.string());
    auto id_of = [&](const char* key) -> std::int64_t {
      if (!c.is_object() || !c.contains(key) || c[key].is_null()) return -1;
      std::string content;
      try {
        content = c[key].is_string() ? c[key].template get<std::string>() : c[key].value("content", std::string());
      } catch (const typename Json::exception& e) {
        fail("text::ByteLevelBpe: ", config.string(), ": ", key, " is neither a string nor {\"content\": a string} (",
             e.what(), ")");
      }
      for (std::size_t id = 0; id < v.tokens.size(); ++id)
        if (v.tokens[id] == content) return static_cast<std::int64_t>(id);
      fail("text::ByteLevelBpe: ", config.string(), ": ", key, " '", content, "' is not a token of ", path.string());
    };
    v.bos = id_of("bos_token");
    v.eos = id_of("eos_token");
    v.pad = id_of("pad_token");
  }
  return ByteLevelBpe(std::move(v), where);
}

} // namespace ftopt::text
