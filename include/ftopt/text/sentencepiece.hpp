#pragma once
/// text::SentencePieceBpe: a SentencePiece BPE vocabulary (Gemma's, the GGUF tokenizer.ggml.model
/// "llama") with the ids of Hugging Face's tokenizer for it, as transformers builds one from a GGUF
/// file (integrations/gguf: a BPE model whose merges are recovered from the vocabulary):
///   1. added tokens are cut out of the text whole, the leftmost first and the longest of those
///      starting there: the tokens typed control (3: <bos>, <start_of_turn>, <unused0>, ...) and
///      user-defined (4: "\n\n", "\t\t", <start_of_image>, ...);
///   2. in the text between them every space becomes "▁" (U+2581); the file's add_space_prefix is
///      false (Gemma's; a vocabulary that asks for a leading "▁" is refused);
///   3. each stretch is split into characters: a character that is a token is its id, one that is
///      not becomes the tokens <0xNN> of its UTF-8 bytes (byte fallback), or <unk> without them;
///   4. adjacent pieces merge pair by pair wherever their concatenation is a token: the best merge
///      first, ranked as transformers' generate_merges sorts them: by the merged token's score
///      (highest first; for Gemma, whose scores do not follow its merge order, by its position in
///      the vocabulary), then the longer left piece, then the longer right one; the leftmost among
///      equals. A heap of candidate merges, as tokenizers' BPE keeps, so a stretch of any length
///      merges in n log n.
/// encode() puts the vocabulary's <bos> first when the file says add_bos_token (transformers'
/// tokenizer(text) does). decode() writes "▁" as a space, <0xNN> runs as their bytes, and control
/// tokens as they are spelled unless asked to skip them. Gemma's vocabulary spells its tokens of
/// two or more spaces with spaces; as transformers does, they are respelled with "▁".
///
///   auto sp = ftopt::text::sentencepiece_from_gguf(ftopt::weights::Gguf("gemma-3-270m-q4_k_m.gguf"));
///   std::vector<std::int64_t> ids = sp.encode("Hello world", "prompt");   // <bos> Hello ▁world
///   std::string text = sp.decode(ids, true);

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ftopt/detail/token_table.hpp>
#include <ftopt/error.hpp>
#include <ftopt/text/added_tokens.hpp>
#include <ftopt/text/unicode.hpp>
#include <ftopt/weights/gguf.hpp>

namespace ftopt::text {

/// What ranks a merge: the merged token's score, or its position in the vocabulary (earlier
/// first; Gemma's, as transformers ranks them for gemma, gemma2 and gemma3 files).
enum class MergeOrder { Score, Position };

/// A SentencePiece BPE vocabulary: tokens by id with their scores and GGUF token types
/// (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
struct SentencePieceVocabulary {
  std::vector<std::string> tokens;
  std::vector<double> scores;
  std::vector<std::int64_t> types;
  MergeOrder order = MergeOrder::Score;
  std::int64_t bos = -1, eos = -1, pad = -1, unk = -1;
  bool add_bos = false;
};

class SentencePieceBpe {
public:
  static constexpr std::string_view space = "\u2581";

  /// `source` names where the vocabulary came from, in errors.
  SentencePieceBpe(SentencePieceVocabulary vocabulary, std::string source)
      : v_(std::move(vocabulary)), source_(std::move(source)) {
    const auto n = v_.tokens.size();
    check(n > 0 && n < static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), source_,
          ": a vocabulary of ", n, " tokens");
    check(v_.scores.size() == n || v_.order == MergeOrder::Position, source_, ": ", v_.scores.size(), " scores for ", n,
          " tokens; a SentencePiece vocabulary ranks its merges by them");
    check(v_.types.size() == n, source_, ": ", v_.types.size(), " token types for ", n, " tokens");
    // Added: the control tokens, and the user-defined ones but the runs of spaces, which
    // transformers' gemma_tokenizer respells "▁▁..." (and then no longer finds as added tokens).
    std::vector<std::int64_t> added;
    for (std::size_t id = 0; id < n; ++id) {
      std::string& t = v_.tokens[id];
      const bool spaces = blank_with_space(t);
      if (v_.types[id] == 3 || (v_.types[id] == 4 && !spaces)) {
        check(!t.empty(), source_, ": added token ", id, " is empty (it would match everywhere)");
        added.push_back(static_cast<std::int64_t>(id));
      }
      if (spaces) {
        std::string spelled;
        for (std::size_t i = code_point_count(t); i > 0; --i) spelled += space;
        t = spelled;
      }
    }
    ids_.reserve(n);
    lengths_.resize(n);
    for (std::size_t id = 0; id < n; ++id) {
      ids_.insert(v_.tokens[id], static_cast<std::int32_t>(id));
      lengths_[id] = static_cast<std::int32_t>(code_point_count(v_.tokens[id]));
    }
    added_ = detail::AddedTokens(v_.tokens, added);

    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_ids_[static_cast<std::size_t>(b)] = ids_.find(name);
    }
    for (const auto k : {v_.bos, v_.eos, v_.pad, v_.unk})
      check(k >= -1 && k < static_cast<std::int64_t>(n), source_, ": special token id ", k, " is outside the ", n,
            " tokens");
    check(!v_.add_bos || v_.bos >= 0, source_, ": add_bos_token is true but the vocabulary names no <bos>");
  }

  /// The ids of UTF-8 `text` (after <bos> where the vocabulary adds one and `add_bos`); text that is
  /// not UTF-8 is an error naming `source` and the byte.
  std::vector<std::int64_t> encode(std::string_view text, std::string_view source = {}, bool add_bos = true) const {
    std::vector<std::int64_t> ids;
    if (add_bos && v_.add_bos) ids.push_back(v_.bos);
    for (std::size_t from = 0; from <= text.size();) {
      const auto [at, id] = added_.next(text, from);
      merge(text.substr(from, at - from), text, from, source, ids);
      if (id < 0) break;
      ids.push_back(id);
      from = at + token(id).size();
    }
    return ids;
  }

  /// The text of `ids`; `skip_control` leaves the control tokens (<bos>, <end_of_turn>, ...) out.
  std::string decode(std::span<const std::int64_t> ids, bool skip_control = false) const {
    std::string out;
    for (const auto id : ids) {
      check(id >= 0 && id < size(), source_, ": decode: token id ", id, " is outside the ", size(), " tokens");
      const auto type = v_.types[static_cast<std::size_t>(id)];
      if (type == 3) {
        if (!skip_control) out += token(id);
      } else if (type == 6) {
        unsigned value = 0;
        check(std::sscanf(token(id).c_str(), "<0x%2X>", &value) == 1, source_, ": byte token ", id, " is spelled '",
              token(id), "', not <0xNN>");
        out += static_cast<char>(value);
      } else {
        const std::string& t = token(id);
        for (std::size_t i = 0; i < t.size();) {
          if (std::string_view(t).substr(i).starts_with(space)) {
            out += ' ';
            i += space.size();
          } else {
            out += t[i++];
          }
        }
      }
    }
    return out;
  }

  std::int64_t size() const { return static_cast<std::int64_t>(v_.tokens.size()); }
  const std::string& token(std::int64_t id) const { return v_.tokens[static_cast<std::size_t>(id)]; }
  /// The id of a token as the vocabulary spells it (spaces as "▁"), or -1.
  std::int64_t id_of(std::string_view token) const { return ids_.find(token); }
  bool is_control(std::int64_t id) const { return v_.types[static_cast<std::size_t>(id)] == 3; }
  const SentencePieceVocabulary& vocabulary() const { return v_; }
  std::int64_t bos_id() const { return v_.bos; }
  std::int64_t eos_id() const { return v_.eos; }
  std::int64_t pad_id() const { return v_.pad; }

private:
  /// A merge's place in transformers' order: smaller first.
  struct Rank {
    double key;  ///< minus the merged token's score, or its position
    std::int32_t left_length, right_length, merged;
    auto operator<=>(const Rank&) const = default;
  };
  struct Candidate {
    Rank rank;       ///< rank.merged: the token the two pieces become
    std::size_t at;  ///< the left piece
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : at > o.at; }
  };
  struct Piece {
    std::int32_t id;
    std::ptrdiff_t prev, next;  ///< -1 at the ends
  };

  /// Whether a token is all white space (Python's str.isspace) with a space in it: transformers
  /// respells those "▁" a code point.
  static bool blank_with_space(std::string_view t) {
    if (t.find(' ') == std::string_view::npos) return false;
    for (std::size_t i = 0; i < t.size();) {
      const char32_t c = next_code_point(t, i);
      const bool white = (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
                         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
                         c == 0x205F || c == 0x3000;
      if (!white) return false;
    }
    return true;
  }

  /// The merge of two adjacent tokens, if their concatenation is one.
  std::optional<Candidate> candidate(const std::vector<Piece>& pieces, std::size_t at) const {
    const auto left = pieces[at].id, right = pieces[static_cast<std::size_t>(pieces[at].next)].id;
    const auto merged = ids_.find(token(left) + token(right));
    if (merged < 0) return {};
    const double key = v_.order == MergeOrder::Position ? static_cast<double>(merged) : -v_.scores[static_cast<std::size_t>(merged)];
    return Candidate{{key, -lengths_[static_cast<std::size_t>(left)], -lengths_[static_cast<std::size_t>(right)], merged}, at};
  }

  /// Appends the ids of `text` (no added token in it), spaces as "▁", merged by rank.
  void merge(std::string_view text, std::string_view whole, std::size_t offset, std::string_view source,
             std::vector<std::int64_t>& ids) const {
    if (text.empty()) return;
    std::vector<Piece> pieces;
    std::string character;
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t at = i;
      if (next_code_point(text, i) == static_cast<char32_t>(-1)) fail_utf8(whole, offset + at, source);
      character.assign(text.substr(at, i - at));
      if (character == " ") character = space;
      const auto id = ids_.find(character);
      const auto add = [&](std::int32_t piece) {  // linked to the piece before it
        if (!pieces.empty()) pieces.back().next = static_cast<std::ptrdiff_t>(pieces.size());
        pieces.push_back({piece, static_cast<std::ptrdiff_t>(pieces.size()) - 1, -1});
      };
      if (id >= 0) {
        add(id);
        continue;
      }
      bool bytes = true;
      for (const unsigned char b : character) bytes = bytes && byte_ids_[b] >= 0;
      if (bytes) {
        for (const unsigned char b : character) add(byte_ids_[b]);
        continue;
      }
      check(v_.unk >= 0, source_, ": the character '", character, "' is neither a token nor bytes with tokens, and "
            "the vocabulary has no <unk>");
      if (pieces.empty() || pieces.back().id != v_.unk) add(static_cast<std::int32_t>(v_.unk));  // fused
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    for (std::size_t k = 0; k + 1 < pieces.size(); ++k)
      if (auto c = candidate(pieces, k)) queue.push(*c);
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Piece& left = pieces[top.at];
      if (left.id < 0 || left.next < 0) continue;  // merged away, or now the last piece
      const auto now = candidate(pieces, top.at);
      if (!now || now->rank.merged != top.rank.merged) continue;  // its right neighbour changed since
      Piece& right = pieces[static_cast<std::size_t>(left.next)];
      left.id = top.rank.merged;
      left.next = right.next;
      if (right.next >= 0) pieces[static_cast<std::size_t>(right.next)].prev = static_cast<std::ptrdiff_t>(top.at);
      right.id = -1;
      if (left.prev >= 0)
        if (auto c = candidate(pieces, static_cast<std::size_t>(left.prev))) queue.push(*c);
      if (left.next >= 0)
        if (auto c = candidate(pieces, top.at)) queue.push(*c);
    }
    for (std::ptrdiff_t k = 0; k >= 0; k = pieces[static_cast<std::size_t>(k)].next) ids.push_back(pieces[static_cast<std::size_t>(k)].id);
  }

  SentencePieceVocabulary v_;
  std::string source_;
  detail::TokenTable ids_;
  std::vector<std::int32_t> lengths_;  ///< each token's length in code points
  std::array<std::int32_t, 256> byte_ids_{};
  detail::AddedTokens added_;
};

/// The SentencePiece tokenizer of a GGUF file (tokenizer.ggml.model "llama": tokens, scores,
/// token_type, bos/eos/padding/unknown ids, add_bos_token, add_space_prefix false). Gemma's
/// architectures (gemma, gemma2, gemma3) rank merges by position, as transformers does; others by
/// score.
inline SentencePieceBpe sentencepiece_from_gguf(const weights::Gguf& file) {
  const std::string where = "text::SentencePieceBpe: " + file.path().string();
  const std::string model = file.string("tokenizer.ggml.model");
  check(model == "llama", where, ": tokenizer.ggml.model is '", model, "', not 'llama' (SentencePiece)");
  check(file.has("tokenizer.ggml.scores"), where, ": the SentencePiece vocabulary has no tokenizer.ggml.scores");
  check(file.has("tokenizer.ggml.token_type"), where, ": the SentencePiece vocabulary has no tokenizer.ggml.token_type");
  const bool prefix = file.has("tokenizer.ggml.add_space_prefix") ? file.boolean("tokenizer.ggml.add_space_prefix") : true;
  check(!prefix, where, ": tokenizer.ggml.add_space_prefix is ", file.has("tokenizer.ggml.add_space_prefix") ? "true" :
        "not given (true)", "; ftopt's SentencePiece reads vocabularies without the leading '\u2581' (Gemma's)");
  SentencePieceVocabulary v;
  v.tokens = file.strings("tokenizer.ggml.tokens");
  v.scores = file.reals("tokenizer.ggml.scores");
  v.types = file.integers("tokenizer.ggml.token_type");
  const std::string arch = file.has("general.architecture") ? file.string("general.architecture") : std::string();
  v.order = arch == "gemma" || arch == "gemma2" || arch == "gemma3" ? MergeOrder::Position : MergeOrder::Score;
  auto id = [&](const char* key) { return file.has(key) ? file.integer(key) : std::int64_t{-1}; };
  v.bos = id("tokenizer.ggml.bos_token_id");
  v.eos = id("tokenizer.ggml.eos_token_id");
  v.pad = id("tokenizer.ggml.padding_token_id");
  v.unk = id("tokenizer.ggml.unknown_token_id");
  v.add_bos = file.has("tokenizer.ggml.add_bos_token") && file.boolean("tokenizer.ggml.add_bos_token");
  return SentencePieceBpe(std::move(v), where);
}

} // namespace ftopt::text
