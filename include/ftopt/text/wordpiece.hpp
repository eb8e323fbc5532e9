#pragma once
/// text::WordPiece: BERT's subword model (Hugging Face tokenizers' `WordPiece`): a vocabulary and
/// the greedy longest-match split of one word into pieces, the pieces after the first carrying
/// the continuation prefix ("##"). A word with a part no piece matches, or longer than
/// max_input_chars_per_word code points, becomes the unknown token as a whole.
///
///   auto wp = ftopt::text::WordPiece::from_vocab_file("model/vocab.txt");
///   std::vector<std::int32_t> ids;
///   wp.split("unaffable", ids);  // un ##aff ##able

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <ftopt/detail/token_table.hpp>
#include <ftopt/error.hpp>
#include <ftopt/text/unicode.hpp>

namespace ftopt::text {

struct WordPieceOptions {
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  std::int64_t max_input_chars_per_word = 100;
};

class WordPiece {
public:
  /// From tokens in id order (id = position); `source` names where they came from in errors.
  WordPiece(const std::vector<std::string>& tokens, WordPieceOptions options = {}, std::string source = "vocabulary")
      : options_(std::move(options)), source_(std::move(source)), tokens_(tokens) {
    check(options_.max_input_chars_per_word >= 1, "WordPiece: max_input_chars_per_word must be >= 1, got ",
          options_.max_input_chars_per_word);
    words_.reserve(tokens_.size());
    const std::string_view prefix = options_.continuing_subword_prefix;
    for (std::size_t id = 0; id < tokens_.size(); ++id) {
      std::string_view token = tokens_[id];
      check(!token.empty(), source_, ": the token of id ", id, " is empty");
      const auto i = static_cast<std::int32_t>(id);
      words_.insert(token, i);
      if (!prefix.empty() && token.size() > prefix.size() && token.substr(0, prefix.size()) == prefix)
        continuations_.insert(token.substr(prefix.size()), i);
    }
    unk_ = words_.find(options_.unk_token);
    check(unk_ >= 0, source_, ": the vocabulary has no unknown token '", options_.unk_token, "'");
  }

  /// BERT's vocab.txt: one token per line, the id is the line number (from 0).
  static WordPiece from_vocab_file(const std::filesystem::path& path, WordPieceOptions options = {}) {
    check(std::filesystem::is_regular_file(path), "WordPiece: ", path.string(), ": no such file");
    std::ifstream in(path, std::ios::binary);
    std::vector<std::string> tokens;
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      check(!line.empty(), "WordPiece: ", path.string(), ": line ", tokens.size() + 1, " is empty (vocab.txt holds one "
            "token per line)");
      tokens.push_back(std::move(line));
    }
    check(!tokens.empty(), "WordPiece: ", path.string(), ": the file holds no tokens");
    return WordPiece(tokens, std::move(options), path.string());
  }

  /// Appends the ids of `word`'s pieces (one word: no white space, already normalized) to `ids`.
  void split(std::string_view word, std::vector<std::int32_t>& ids) const {
    if (word.empty()) return;
    if (const auto id = words_.find(word); id >= 0) {  // most words are in the vocabulary whole
      if (chars(word) <= options_.max_input_chars_per_word) ids.push_back(id);
      else ids.push_back(unk_);
      return;
    }
    if (chars(word) > options_.max_input_chars_per_word) {
      ids.push_back(unk_);
      return;
    }
    const std::size_t first = ids.size();
    for (std::size_t start = 0; start < word.size();) {
      const detail::TokenTable& table = start == 0 ? words_ : continuations_;
      std::size_t end = std::min(word.size(), start + table.longest());
      std::int32_t found = -1;
      for (; end > start; --end) {
        if (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) continue;
        if ((found = table.find(word.substr(start, end - start))) >= 0) break;
      }
      if (found < 0) {
        ids.resize(first);
        ids.push_back(unk_);
        return;
      }
      ids.push_back(found);
      start = end;
    }
  }

  std::int32_t unk_id() const { return unk_; }
  /// The id of `token`, or -1.
  std::int32_t id_of(std::string_view token) const { return words_.find(token); }
  const std::string& token_of(std::int32_t id) const {
    check(id >= 0 && static_cast<std::size_t>(id) < tokens_.size(), "WordPiece: id ", id, " is outside the vocabulary of ",
          tokens_.size());
    return tokens_[static_cast<std::size_t>(id)];
  }
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  const WordPieceOptions& options() const { return options_; }
  const std::string& source() const { return source_; }

private:
  static std::int64_t chars(std::string_view word) { return static_cast<std::int64_t>(code_point_count(word)); }

  WordPieceOptions options_;
  std::string source_;
  std::vector<std::string> tokens_;
  detail::TokenTable words_, continuations_;
  std::int32_t unk_ = -1;
};

} // namespace ftopt::text
