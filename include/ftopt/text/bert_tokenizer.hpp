#pragma once
/// text::BertTokenizer: Hugging Face's BertTokenizerFast (tokenizers' BertNormalizer,
/// BertPreTokenizer, WordPiece and the [CLS] A [SEP] template), giving the same ids:
///   1. special tokens written in the text ("[SEP]") are matched first, as they are;
///   2. the normalizer removes NUL, U+FFFD and control characters, turns white space into ' ',
///      puts spaces around CJK ideographs, strips accents (NFD, then non-spacing marks go) and
///      lower-cases (both on by default: uncased BERT);
///   3. the pre-tokenizer splits on white space and isolates each punctuation character;
///   4. WordPiece splits each word; 5. [CLS] ... [SEP], truncated to max_length.
/// A batch is padded to its longest sequence (or to max_length) with [PAD] and an attention mask.
///
///   auto tok = ftopt::text::BertTokenizer::from_pretrained(model_dir);  // tokenizer.json or vocab.txt
///   auto batch = tok.encode_batch(texts, {.max_length = 128});         // input_ids, attention_mask
///
/// Text must be UTF-8: anything else throws, naming the source and the byte offset. A tokenizer
/// is immutable once made: encode from any number of threads.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>

#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/text/unicode.hpp>
#include <ftopt/text/wordpiece.hpp>

namespace ftopt::text {

/// tokenizers' BertNormalizer options, by its names.
struct BertNormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::optional<bool> strip_accents;  ///< unset: follows lowercase (HF's None)
  bool lowercase = true;
};

struct BertTokenizerOptions {
  BertNormalizerOptions normalizer;
  WordPieceOptions wordpiece;
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string mask_token = "[MASK]";
};

enum class Padding {
  Longest,    ///< to the batch's longest sequence (dynamic padding)
  MaxLength,  ///< to max_length
};

struct EncodeOptions {
  std::optional<std::int64_t> max_length;  ///< truncate to this many ids, [CLS] and [SEP] included
  bool add_special_tokens = true;          ///< [CLS] ... [SEP]
  Padding padding = Padding::Longest;      ///< for encode_batch
};

/// A padded batch: input_ids and attention_mask, int64 [B, T] (mask 1 on tokens, 0 on padding).
struct TextBatch {
  at::Tensor input_ids;
  at::Tensor attention_mask;
};

class BertTokenizer {
public:
  BertTokenizer(WordPiece wordpiece, BertTokenizerOptions options = {})
      : options_(std::move(options)), wordpiece_(std::move(wordpiece)) {
    const auto special = [&](const std::string& token, const char* what) {
      const auto id = wordpiece_.id_of(token);
      check(id >= 0, wordpiece_.source(), ": the vocabulary has no ", what, " token '", token, "'");
      specials_.push_back({token, id});
      return id;
    };
    pad_ = special(options_.pad_token, "padding");
    special(options_.wordpiece.unk_token, "unknown");
    cls_ = special(options_.cls_token, "[CLS]");
    sep_ = special(options_.sep_token, "[SEP]");
    if (wordpiece_.id_of(options_.mask_token) >= 0) special(options_.mask_token, "mask");
  }

  /// From BERT's vocab.txt and options (transformers' BertTokenizer(vocab_file, do_lower_case, ...)).
  static BertTokenizer from_vocab_file(const std::filesystem::path& vocab, BertTokenizerOptions options = {}) {
    return BertTokenizer(WordPiece::from_vocab_file(vocab, options.wordpiece), options);
  }

  /// From a tokenizers tokenizer.json whose normalizer is BertNormalizer, pre-tokenizer
  /// BertPreTokenizer and model WordPiece (the file's truncation and padding are not applied:
  /// pass EncodeOptions, as transformers does).
  template <class Json = nlohmann::json>
  static BertTokenizer from_tokenizer_json(const std::filesystem::path& path);

  /// From a Hugging Face model folder: tokenizer.json, else vocab.txt with tokenizer_config.json's
  /// do_lower_case, strip_accents and tokenize_chinese_chars.
  template <class Json = nlohmann::json>
  static BertTokenizer from_pretrained(const std::filesystem::path& folder);

  /// The ids of one text. `source` names the text in errors (a file name).
  std::vector<std::int32_t> encode(std::string_view text, const EncodeOptions& options = {},
                                   std::string_view source = {}) const {
    std::vector<std::int32_t> ids;
    if (options.add_special_tokens) ids.push_back(cls_);
    tokenize_into(text, ids, source);
    if (options.max_length) {
      const std::int64_t keep = *options.max_length - (options.add_special_tokens ? 1 : 0);
      check(keep >= (options.add_special_tokens ? 1 : 0), "BertTokenizer: max_length ", *options.max_length,
            " leaves no room for [CLS] and [SEP]");
      if (static_cast<std::int64_t>(ids.size()) > keep) ids.resize(static_cast<std::size_t>(keep));
    }
    if (options.add_special_tokens) ids.push_back(sep_);
    return ids;
  }

  /// The tokens of one text, without [CLS] and [SEP] (to read what the tokenizer did).
  std::vector<std::string> tokenize(std::string_view text) const {
    std::vector<std::int32_t> ids;
    tokenize_into(text, ids, {});
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (auto id : ids) tokens.push_back(wordpiece_.token_of(id));
    return tokens;
  }

  /// Pads encoded sequences into a batch (right padding with [PAD], as BERT's tokenizer).
  TextBatch pad(const std::vector<std::vector<std::int32_t>>& sequences, std::optional<std::int64_t> length = {}) const {
    check(!sequences.empty(), "BertTokenizer: a batch needs at least one sequence");
    std::int64_t T = 0;
    for (const auto& s : sequences) T = std::max<std::int64_t>(T, static_cast<std::int64_t>(s.size()));
    if (length) T = std::max(T, *length);
    const auto B = static_cast<std::int64_t>(sequences.size());
    at::Tensor ids = at::full({B, T}, pad_, at::kLong), mask = at::zeros({B, T}, at::kLong);
    auto id = ids.accessor<std::int64_t, 2>();
    auto m = mask.accessor<std::int64_t, 2>();
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& s = sequences[static_cast<std::size_t>(b)];
      for (std::size_t t = 0; t < s.size(); ++t) {
        id[b][static_cast<std::int64_t>(t)] = s[t];
        m[b][static_cast<std::int64_t>(t)] = 1;
      }
    }
    return {ids, mask};
  }

  /// Encodes and pads a batch of texts (transformers' tokenizer(texts, padding=..., truncation=True,
  /// max_length=...)).
  TextBatch encode_batch(std::span<const std::string> texts, const EncodeOptions& options = {}) const {
    std::vector<std::vector<std::int32_t>> sequences;
    sequences.reserve(texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) sequences.push_back(encode(texts[i], options, {}));
    std::optional<std::int64_t> length;
    if (options.padding == Padding::MaxLength) {
      check(options.max_length.has_value(), "BertTokenizer: Padding::MaxLength needs max_length");
      length = options.max_length;
    }
    return pad(sequences, length);
  }

  std::int32_t pad_id() const { return pad_; }
  std::int32_t cls_id() const { return cls_; }
  std::int32_t sep_id() const { return sep_; }
  std::int64_t vocab_size() const { return wordpiece_.size(); }
  const WordPiece& wordpiece() const { return wordpiece_; }
  const BertTokenizerOptions& options() const { return options_; }

private:
  struct Special {
    std::string text;
    std::int32_t id;
  };

  /// Appends the WordPiece ids of `text` (no [CLS]/[SEP]) to `ids`.
  void tokenize_into(std::string_view text, std::vector<std::int32_t>& ids, std::string_view source) const {
    std::size_t begin = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '[') continue;
      for (const Special& s : specials_) {
        if (text.compare(i, s.text.size(), s.text) != 0) continue;
        normalize_and_split(text, begin, i, ids, source);
        ids.push_back(s.id);
        begin = i + s.text.size();
        i = begin - 1;
        break;
      }
    }
    normalize_and_split(text, begin, text.size(), ids, source);
  }

  /// Normalizes text[begin, end) as BertNormalizer, splits it as BertPreTokenizer and appends
  /// each word's pieces. Pure ASCII runs take a short path with the same result.
  void normalize_and_split(std::string_view text, std::size_t begin, std::size_t end, std::vector<std::int32_t>& ids,
                           std::string_view source) const {
    const BertNormalizerOptions& n = options_.normalizer;
    const bool strip = n.strip_accents.value_or(n.lowercase);
    std::string word;
    auto flush = [&] {
      wordpiece_.split(word, ids);
      word.clear();
    };
    auto add = [&](char32_t cp) {  // one normalized code point into the pre-tokenizer
      if (is_white_space(cp)) {
        flush();
      } else if (is_bert_punctuation(cp)) {
        flush();
        append_utf8(word, cp);
        flush();
      } else {
        append_utf8(word, cp);
      }
    };
    std::vector<char32_t> run, lowered;  // a run of code points up to the next ASCII one
    auto finish_run = [&] {
      if (run.empty()) return;
      if (strip) {
        order_marks(run);
        std::erase_if(run, [](char32_t cp) { return is_bert_nonspacing_mark(cp); });
      }
      if (n.lowercase) {
        lowered.clear();
        for (char32_t cp : run) append_lowercase(lowered, cp);
        for (char32_t cp : lowered) add(cp);
      } else {
        for (char32_t cp : run) add(cp);
      }
      run.clear();
    };
    for (std::size_t i = begin; i < end;) {
      const auto byte = static_cast<unsigned char>(text[i]);
      if (byte < 0x80) {  // ASCII: no decomposition, no marks, ASCII lower-casing
        finish_run();
        ++i;
        char32_t cp = byte;
        if (n.clean_text) {
          if (cp == 0 || is_bert_control(cp)) continue;
          if (is_white_space(cp)) cp = ' ';
        }
        if (n.lowercase && cp >= 'A' && cp <= 'Z') cp += 32;
        if (cp == ' ' || (cp >= '\t' && cp <= '\r')) flush();
        else if (is_bert_punctuation(cp)) {
          flush();
          word += static_cast<char>(cp);
          flush();
        } else word += static_cast<char>(cp);
        continue;
      }
      const std::size_t at = i;
      char32_t cp = next_code_point(text, i);
      if (cp == static_cast<char32_t>(-1) || i > end) fail_utf8(text, at, source);
      if (n.clean_text) {
        if (cp == 0xFFFD || is_bert_control(cp)) continue;
        if (is_white_space(cp)) cp = ' ';
      }
      const bool chinese = n.handle_chinese_chars && is_bert_chinese(cp);
      if (chinese) run.push_back(' ');
      if (strip) append_nfd(run, cp);
      else run.push_back(cp);
      if (chinese) run.push_back(' ');
    }
    finish_run();
    flush();
  }

  BertTokenizerOptions options_;
  WordPiece wordpiece_;
  std::vector<Special> specials_;
  std::int32_t pad_ = 0, cls_ = 0, sep_ = 0;
};

template <class Json>
BertTokenizer BertTokenizer::from_tokenizer_json(const std::filesystem::path& path) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const std::string where = "BertTokenizer: " + path.string();
  const Json file = ftopt::detail::read_json_file<Json>(path, where);
  BertTokenizerOptions options;
  std::vector<std::string> tokens;
  try {
    auto field = [&](const Json& object, const char* key, const char* within) -> const Json& {
      check(object.is_object() && object.contains(key), where, ": ", within, " has no '", key, "'");
      return object[key];
    };
    auto type_of = [&](const Json& object, const char* within) {
      const Json& type = field(object, "type", within);
      check(type.is_string(), where, ": ", within, ".type is not a string");
      return type.template get<std::string>();
    };
    const Json& model = field(file, "model", "the file");
    const std::string model_type = type_of(model, "model");
    check(model_type == "WordPiece", where, ": model type '", model_type, "' is not WordPiece (BertTokenizer reads "
          "BERT-family tokenizers)");
    if (model.contains("unk_token")) options.wordpiece.unk_token = model["unk_token"].template get<std::string>();
    if (model.contains("continuing_subword_prefix"))
      options.wordpiece.continuing_subword_prefix = model["continuing_subword_prefix"].template get<std::string>();
    if (model.contains("max_input_chars_per_word"))
      options.wordpiece.max_input_chars_per_word = model["max_input_chars_per_word"].template get<std::int64_t>();
    if (file.contains("normalizer") && !file["normalizer"].is_null()) {
      const Json& norm = file["normalizer"];
      const std::string type = type_of(norm, "normalizer");
      check(type == "BertNormalizer", where, ": normalizer type '", type, "' is not BertNormalizer");
      auto flag = [&](const char* key, bool fallback) {
        return norm.contains(key) && !norm[key].is_null() ? norm[key].template get<bool>() : fallback;
      };
      options.normalizer.clean_text = flag("clean_text", true);
      options.normalizer.handle_chinese_chars = flag("handle_chinese_chars", true);
      options.normalizer.lowercase = flag("lowercase", true);
      if (norm.contains("strip_accents") && !norm["strip_accents"].is_null())
        options.normalizer.strip_accents = norm["strip_accents"].template get<bool>();
    }
    if (file.contains("pre_tokenizer") && !file["pre_tokenizer"].is_null()) {
      const std::string type = type_of(file["pre_tokenizer"], "pre_tokenizer");
      check(type == "BertPreTokenizer", where, ": pre_tokenizer type '", type, "' is not BertPreTokenizer");
    }
    const Json& vocab = field(model, "vocab", "model");
    check(vocab.is_object() && !vocab.empty(), where, ": model.vocab is not a non-empty object of token: id");
    tokens.resize(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const auto id = it.value().template get<std::int64_t>();
      check(id >= 0 && id < static_cast<std::int64_t>(tokens.size()) && tokens[static_cast<std::size_t>(id)].empty(), where,
            ": model.vocab gives '", it.key(), "' the id ", id, ", outside 0..", tokens.size() - 1, " or taken twice");
      tokens[static_cast<std::size_t>(id)] = it.key();
    }
  } catch (const typename Json::exception& e) {  // a field of the wrong JSON type
    fail(where, ": ", e.what());
  }
  return BertTokenizer(WordPiece(tokens, options.wordpiece, path.string()), options);
}

template <class Json>
BertTokenizer BertTokenizer::from_pretrained(const std::filesystem::path& folder) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  check(std::filesystem::is_directory(folder), "BertTokenizer: ", folder.string(), " is not a folder");
  if (std::filesystem::is_regular_file(folder / "tokenizer.json"))
    return from_tokenizer_json<Json>(folder / "tokenizer.json");
  check(std::filesystem::is_regular_file(folder / "vocab.txt"), "BertTokenizer: ", folder.string(),
        " has neither tokenizer.json nor vocab.txt");
  BertTokenizerOptions options;
  if (const auto config = folder / "tokenizer_config.json"; std::filesystem::is_regular_file(config)) {
    const Json c = ftopt::detail::read_json_file<Json>(config, "BertTokenizer: " + config.string());
    try {
      if (c.contains("do_lower_case")) options.normalizer.lowercase = c["do_lower_case"].template get<bool>();
      if (c.contains("tokenize_chinese_chars"))
        options.normalizer.handle_chinese_chars = c["tokenize_chinese_chars"].template get<bool>();
      if (c.contains("strip_accents") && !c["strip_accents"].is_null())
        options.normalizer.strip_accents = c["strip_accents"].template get<bool>();
    } catch (const typename Json::exception& e) {
      fail("BertTokenizer: ", config.string(), ": ", e.what());
    }
  }
  return from_vocab_file(folder / "vocab.txt", options);
}

} // namespace ftopt::text
