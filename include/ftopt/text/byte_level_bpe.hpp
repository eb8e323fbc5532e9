#pragma once
/// text::ByteLevelBpe: the byte-level BPE tokenizer of GPT-2 and of the Llama-family models that
/// use it (SmolLM2, ...), with Hugging Face tokenizers' results:
///   1. added tokens (<|im_start|>, <|endoftext|>, ...) are cut out of the text whole, the
///      longest first where two start at the same place; the text between them is put in NFC
///      where the tokenizer says so (Qwen2's);
///   2. the rest is pre-tokenized: with `Gpt2Digits` (SmolLM's: tokenizers' Digits with
///      individual_digits, then ByteLevel) every digit is a piece of its own first; then GPT-2's
///      pattern  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
///      cuts words, written out here as a scanner (categories from ICU, text/unicode.hpp); or
///      Llama 3's pattern (`Llama3`; `Qwen2`: its digits one by one), llama3_pattern below;
///   3. each word's bytes become GPT-2's printable stand-ins (bytes_to_unicode) and merge pair by
///      pair, the pair of lowest merge rank first (the leftmost among equals), into vocabulary ids.
/// decode() maps ids back to tokens and the stand-ins back to bytes. encode() and decode() are
/// const and keep no state: a Pipeline's workers may share one tokenizer.
///
///   auto bpe = ftopt::text::bpe_from_gguf(ftopt::weights::Gguf(path));  // text/bpe_files.hpp
///   std::vector<std::int64_t> ids = bpe.encode("Hello world", "prompt");
///   std::string text = bpe.decode(ids);

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <unicode/uchar.h>

#include <ftopt/detail/token_table.hpp>
#include <ftopt/error.hpp>
#include <ftopt/text/added_tokens.hpp>
#include <ftopt/text/unicode.hpp>

namespace ftopt::text {

/// How text is cut into words before the merges.
enum class BpePreTokenizer {
  Gpt2,        ///< GPT-2's pattern (tokenizers' ByteLevel with use_regex)
  Gpt2Digits,  ///< every digit alone, then GPT-2's pattern (SmolLM's; GGUF's "smollm" and friends)
  Llama3,      ///< Llama 3's pattern, numbers in pieces of up to 3 digits (GGUF's "llama-bpe")
  Qwen2,       ///< Llama 3's pattern with every digit alone (Qwen2's; GGUF's "qwen2")
};

/// The patterns of BpePreTokenizer::Llama3 and Qwen2, as tokenizer.json's Split holds them.
inline constexpr std::string_view llama3_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view qwen2_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// What a byte-level BPE tokenizer is made of, in the vocabulary's spelling (bytes as GPT-2's
/// stand-ins): tokens by id, merges "left right" by rank, the ids of added (special) tokens.
struct BpeVocabulary {
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
  std::vector<std::int64_t> added;  ///< matched whole in the text (control and user-defined tokens)
  BpePreTokenizer pre_tokenizer = BpePreTokenizer::Gpt2;
  /// A word that is a token of its own is that token, unmerged (tokenizers' BPE ignore_merges,
  /// Llama 3's; llama.cpp sets it for the "llama-bpe" family).
  bool ignore_merges = false;
  /// The text between added tokens is put in NFC first (tokenizer.json's normalizer NFC, Qwen2's).
  bool nfc = false;
  std::int64_t bos = -1, eos = -1, pad = -1;  ///< -1: none
};

namespace detail {
/// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n.
inline const std::array<char32_t, 256>& byte_stand_ins() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

/// The inverse of byte_stand_ins: the byte each stand-in stands for, by code point (-1: none).
inline const std::array<std::int16_t, 512>& stand_in_bytes() {
  static const std::array<std::int16_t, 512> table = [] {
    std::array<std::int16_t, 512> t{};
    t.fill(-1);
    for (std::size_t b = 0; b < 256; ++b) t[byte_stand_ins()[b]] = static_cast<std::int16_t>(b);
    return t;
  }();
  return table;
}

inline bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_L_MASK) != 0;
}
inline bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_N_MASK) != 0;
}

/// The end of the word GPT-2's pattern matches at cps[i] (i < end).
inline std::size_t gpt2_word_end(const std::vector<char32_t>& cps, std::size_t i, std::size_t end) {
  const auto at = [&](std::size_t k) { return k < end ? cps[k] : char32_t{0}; };
  const char32_t c = cps[i];
  if (c == '\'' && i + 1 < end) {  // 's 't 're 've 'm 'll 'd (case-sensitive, as GPT-2's)
    const char32_t n = at(i + 1);
    if (n == 's' || n == 't' || n == 'm' || n == 'd') return i + 2;
    if (i + 2 < end && ((n == 'r' && at(i + 2) == 'e') || (n == 'v' && at(i + 2) == 'e') || (n == 'l' && at(i + 2) == 'l')))
      return i + 3;
  }
  const std::size_t body = (c == ' ' && i + 1 < end) ? i + 1 : i;  // the optional leading space
  const auto run = [&](std::size_t k, auto in_class) {
    while (k < end && in_class(cps[k])) ++k;
    return k;
  };
  const auto other = [](char32_t x) { return !is_white_space(x) && !is_letter(x) && !is_number(x); };
  if (is_letter(cps[body])) return run(body, is_letter);
  if (is_number(cps[body])) return run(body, is_number);
  if (other(cps[body])) return run(body, other);
  // White space: \s+(?!\S), else \s+.
  const std::size_t space_end = run(i, is_white_space);
  if (space_end == end || space_end - i == 1) return space_end;
  return space_end - 1;  // leave the last one to lead the next word
}

/// The end of the word Llama 3's pattern (Qwen2's with max_digits 1) matches at cps[i] (i < end):
///   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
///   |\s*[\r\n]+|\s+(?!\S)|\s+
/// the alternatives tried in that order, as a regex engine does.
inline std::size_t llama3_word_end(const std::vector<char32_t>& cps, std::size_t i, std::size_t end,
                                   std::size_t max_digits) {
  const auto run = [&](std::size_t k, auto in_class) {
    while (k < end && in_class(cps[k])) ++k;
    return k;
  };
  const auto newline = [](char32_t x) { return x == '\r' || x == '\n'; };
  const auto other = [](char32_t x) { return !is_white_space(x) && !is_letter(x) && !is_number(x); };
  // Case-insensitive as Oniguruma folds: the long s (U+017F) folds to s.
  const auto lower = [](char32_t x) { return x == 0x17F ? U's' : (x >= 'A' && x <= 'Z') ? x + 32 : x; };
  const char32_t c = cps[i];
  if (c == '\'' && i + 1 < end) {
    const char32_t n = lower(cps[i + 1]);
    if (n == 's' || n == 't' || n == 'm' || n == 'd') return i + 2;
    if (i + 2 < end) {
      const char32_t m = lower(cps[i + 2]);
      if ((n == 'r' && m == 'e') || (n == 'v' && m == 'e') || (n == 'l' && m == 'l')) return i + 3;
    }
  }
  if (is_letter(c)) return run(i, is_letter);
  if (!newline(c) && !is_number(c) && i + 1 < end && is_letter(cps[i + 1])) return run(i + 1, is_letter);
  if (is_number(c)) {
    std::size_t k = i;
    while (k < end && k - i < max_digits && is_number(cps[k])) ++k;
    return k;
  }
  const std::size_t body = (c == ' ' && i + 1 < end && other(cps[i + 1])) ? i + 1 : i;
  if (other(cps[body])) return run(run(body, other), newline);
  // White space: up to its last line break (\s*[\r\n]+), else \s+(?!\S), else \s+.
  const std::size_t space_end = run(i, is_white_space);
  for (std::size_t k = space_end; k > i; --k)
    if (newline(cps[k - 1])) return k;
  if (space_end == end || space_end - i == 1) return space_end;
  return space_end - 1;
}
} // namespace detail

class ByteLevelBpe {
public:
  /// `source` names where the vocabulary came from, in errors.
  ByteLevelBpe(BpeVocabulary vocabulary, std::string source)
      : vocabulary_(std::move(vocabulary)), source_(std::move(source)) {
    const auto n = vocabulary_.tokens.size();
    check(n > 0 && n < static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), source_,
          ": a vocabulary of ", n, " tokens");
    ids_.reserve(n);
    for (std::size_t id = 0; id < n; ++id) ids_.insert(vocabulary_.tokens[id], static_cast<std::int32_t>(id));
    for (std::size_t b = 0; b < 256; ++b) {
      std::string s;
      append_utf8(s, detail::byte_stand_ins()[b]);
      byte_ids_[b] = ids_.find(s);
    }
    merges_.reserve(vocabulary_.merges.size());
    for (std::size_t rank = 0; rank < vocabulary_.merges.size(); ++rank) {
      const std::string& merge = vocabulary_.merges[rank];
      const auto space = merge.find(' ', 1);
      check(space != std::string::npos && merge.find(' ', space + 1) == std::string::npos, source_, ": merge ", rank,
            " '", merge, "' is not two tokens separated by one space");
      const auto left = ids_.find(std::string_view(merge).substr(0, space));
      const auto right = ids_.find(std::string_view(merge).substr(space + 1));
      const auto merged = ids_.find(merge.substr(0, space) + merge.substr(space + 1));
      check(left >= 0 && right >= 0 && merged >= 0, source_, ": merge ", rank, " '", merge,
            "' names a token the vocabulary lacks");
      merges_.emplace(pair_key(left, right), Merge{static_cast<std::int32_t>(rank), merged});
    }
    for (const auto id : vocabulary_.added) {
      check(id >= 0 && static_cast<std::size_t>(id) < n, source_, ": added token id ", id, " is outside the ", n,
            " tokens");
      check(!token(id).empty(), source_, ": added token ", id, " is empty (it would match everywhere)");
      added_.push_back(id);
    }
    std::sort(added_.begin(), added_.end());
    added_tokens_ = detail::AddedTokens(vocabulary_.tokens, added_);
    for (const auto k : {vocabulary_.bos, vocabulary_.eos, vocabulary_.pad})
      check(k >= -1 && k < static_cast<std::int64_t>(n), source_, ": special token id ", k, " is outside the ", n,
            " tokens");
  }

  /// The ids of UTF-8 `text`; text that is not UTF-8 is an error naming `source` and the byte.
  std::vector<std::int64_t> encode(std::string_view text, std::string_view source = {}) const {
    std::vector<std::int64_t> ids;
    for_each_word(text, source, [&](std::string_view word, std::int64_t added) {
      if (added >= 0) ids.push_back(added);
      else merge_word(word, ids);
    });
    return ids;
  }

  /// The words that encode() merges one by one (and the added tokens), as UTF-8 text.
  std::vector<std::string> words(std::string_view text, std::string_view source = {}) const {
    std::vector<std::string> out;
    for_each_word(text, source, [&](std::string_view word, std::int64_t) { out.emplace_back(word); });
    return out;
  }

  /// The text of `ids`; `skip_added` leaves the added (special) tokens out.
  std::string decode(std::span<const std::int64_t> ids, bool skip_added = false) const {
    std::string bytes;
    for (const auto id : ids) {
      check(id >= 0 && id < size(), source_, ": decode: token id ", id, " is outside the ", size(), " tokens");
      if (is_added(id)) {
        if (!skip_added) bytes += token(id);
        continue;
      }
      const std::string& t = token(id);
      for (std::size_t i = 0; i < t.size();) {
        const char32_t cp = next_code_point(t, i);
        bytes += static_cast<char>(byte_of(cp));
      }
    }
    return bytes;
  }

  std::int64_t size() const { return static_cast<std::int64_t>(vocabulary_.tokens.size()); }
  const std::string& token(std::int64_t id) const { return vocabulary_.tokens[static_cast<std::size_t>(id)]; }
  /// The id of a token as the vocabulary spells it, or -1.
  std::int64_t id_of(std::string_view token) const { return ids_.find(token); }
  bool is_added(std::int64_t id) const { return std::binary_search(added_.begin(), added_.end(), id); }
  const BpeVocabulary& vocabulary() const { return vocabulary_; }
  std::int64_t bos_id() const { return vocabulary_.bos; }
  std::int64_t eos_id() const { return vocabulary_.eos; }
  std::int64_t pad_id() const { return vocabulary_.pad; }

private:
  struct Merge {
    std::int32_t rank, id;
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  /// The first added token at or after `from`: (where, id), or (text.size(), -1).
  std::pair<std::size_t, std::int64_t> next_added(std::string_view text, std::size_t from) const {
    return added_tokens_.next(text, from);
  }

  /// visit(word, -1) for each word of `text`, visit(token, id) for each added token, in order.
  template <class Visit>
  void for_each_word(std::string_view text, std::string_view source, Visit visit) const {
    std::size_t from = 0;
    while (from < text.size()) {
      const auto [at, id] = next_added(text, from);
      split_plain(text.substr(from, at - from), from, text, source, visit);
      if (id < 0) break;
      visit(std::string_view(token(id)), id);
      from = at + token(id).size();
    }
  }

  template <class Visit>
  void split_plain(std::string_view text, std::size_t offset, std::string_view whole, std::string_view source,
                   Visit& visit) const {
    if (text.empty()) return;
    std::vector<char32_t> cps;
    std::vector<std::size_t> starts;  // byte offset of each code point, and the end
    cps.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t at = i;
      const char32_t cp = next_code_point(text, i);
      if (cp == static_cast<char32_t>(-1)) fail_utf8(whole, offset + at, source);
      cps.push_back(cp);
      starts.push_back(at);
    }
    starts.push_back(text.size());
    if (vocabulary_.nfc)
      if (const auto composed = nfc_if_changed(cps)) return split_plain(*composed, 0, *composed, source, visit);
    const auto word = [&](std::size_t a, std::size_t b) { visit(text.substr(starts[a], starts[b] - starts[a]), -1); };
    const auto word_end = [pre = vocabulary_.pre_tokenizer](const std::vector<char32_t>& all, std::size_t i,
                                                            std::size_t end) {
      if (pre == BpePreTokenizer::Llama3) return detail::llama3_word_end(all, i, end, 3);
      if (pre == BpePreTokenizer::Qwen2) return detail::llama3_word_end(all, i, end, 1);
      return detail::gpt2_word_end(all, i, end);
    };
    const bool digits = vocabulary_.pre_tokenizer == BpePreTokenizer::Gpt2Digits;
    for (std::size_t piece = 0; piece < cps.size();) {
      if (digits && detail::is_number(cps[piece])) {  // tokenizers' Digits(individual_digits=True)
        word(piece, piece + 1);
        ++piece;
        continue;
      }
      std::size_t piece_end = piece;
      while (piece_end < cps.size() && !(digits && detail::is_number(cps[piece_end]))) ++piece_end;
      for (std::size_t i = piece; i < piece_end;) {
        const std::size_t end = word_end(cps, i, piece_end);
        word(i, end);
        i = end;
      }
      piece = piece_end;
    }
  }

  /// The ids of one word (its UTF-8 bytes), merged by rank.
  void merge_word(std::string_view bytes, std::vector<std::int64_t>& ids) const {
    if (vocabulary_.ignore_merges) {
      std::string spelled;
      for (const unsigned char b : bytes) append_utf8(spelled, detail::byte_stand_ins()[b]);
      if (const auto whole = ids_.find(spelled); whole >= 0) {
        ids.push_back(whole);
        return;
      }
    }
    std::vector<std::int32_t> symbols;
    symbols.reserve(bytes.size());
    for (const unsigned char b : bytes) {
      check(byte_ids_[b] >= 0, source_, ": the vocabulary has no token for the byte 0x", std::hex, int{b});
      symbols.push_back(byte_ids_[b]);
    }
    while (symbols.size() > 1) {
      std::int32_t best_rank = std::numeric_limits<std::int32_t>::max(), best_id = -1;
      std::size_t best_at = 0;
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        const auto found = merges_.find(pair_key(symbols[i], symbols[i + 1]));
        if (found != merges_.end() && found->second.rank < best_rank)
          best_rank = found->second.rank, best_id = found->second.id, best_at = i;
      }
      if (best_id < 0) break;
      symbols[best_at] = best_id;
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
    ids.insert(ids.end(), symbols.begin(), symbols.end());
  }

  std::uint8_t byte_of(char32_t stand_in) const {
    const auto& bytes = detail::stand_in_bytes();
    if (stand_in < bytes.size() && bytes[stand_in] >= 0) return static_cast<std::uint8_t>(bytes[stand_in]);
    fail(source_, ": decode: the token character U+", std::hex, static_cast<std::uint32_t>(stand_in),
         " is not one of byte-level BPE's byte stand-ins");
  }

  BpeVocabulary vocabulary_;
  std::string source_;
  text::detail::TokenTable ids_;
  std::array<std::int32_t, 256> byte_ids_{};
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::vector<std::int64_t> added_;  // sorted
  detail::AddedTokens added_tokens_;
};

} // namespace ftopt::text
