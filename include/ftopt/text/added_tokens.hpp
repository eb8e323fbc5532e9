#pragma once
/// text::detail::AddedTokens: finds a tokenizer's added tokens (<|im_start|>, <start_of_turn>,
/// "\n\n", ...) in text, as Hugging Face tokenizers' AddedVocabulary does: the leftmost match, the
/// longest of those starting there. Tokens are bucketed by their first byte, so a scan costs one
/// lookup a byte plus the candidates that start with it (a Gemma vocabulary has 6,414 of them).

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ftopt::text::detail {

class AddedTokens {
public:
  /// `ids` index `tokens`; an empty token is the caller's to refuse.
  AddedTokens(const std::vector<std::string>& tokens, const std::vector<std::int64_t>& ids) {
    for (const auto id : ids) {
      const std::string& t = tokens[static_cast<std::size_t>(id)];
      if (!t.empty()) by_first_[static_cast<unsigned char>(t[0])].push_back({t, id});
    }
    for (auto& bucket : by_first_)  // longest first: the first that matches at a place is the longest
      std::stable_sort(bucket.begin(), bucket.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
  AddedTokens() = default;

  /// The first added token at or after `from`: (where, id), or (text.size(), -1).
  std::pair<std::size_t, std::int64_t> next(std::string_view text, std::size_t from) const {
    for (std::size_t at = from; at < text.size(); ++at)
      for (const auto& [token, id] : by_first_[static_cast<unsigned char>(text[at])])
        if (text.substr(at).starts_with(token)) return {at, id};
    return {text.size(), -1};
  }

private:
  std::array<std::vector<std::pair<std::string, std::int64_t>>, 256> by_first_;
};

} // namespace ftopt::text::detail
