#pragma once
/// detail::TokenTable: the string -> id table of the tokenizers (text::WordPiece,
/// text::ByteLevelBpe).

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ftopt::text::detail {

/// A string -> id table with open addressing, its keys in one arena: lookups by string_view
/// without allocating (the hot path of tokenizing).
class TokenTable {
public:
  void reserve(std::size_t n) {
    std::size_t capacity = 16;
    while (capacity < 2 * n) capacity *= 2;
    slots_.assign(capacity, Slot{});
  }
  /// Adds `key` with `id`; false when the key is there already (the first id stays).
  bool insert(std::string_view key, std::int32_t id) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    const std::uint64_t h = hash(key);
    for (std::size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = {static_cast<std::uint32_t>(arena_.size()), static_cast<std::uint32_t>(key.size()), id,
             static_cast<std::uint32_t>(h)};
        arena_.append(key);
        ++size_;
        longest_ = std::max(longest_, key.size());
        return true;
      }
      if (s.hash == static_cast<std::uint32_t>(h) && view(s) == key) return false;
    }
  }
  /// The id of `key`, or -1.
  std::int32_t find(std::string_view key) const {
    if (slots_.empty() || key.size() > longest_) return -1;
    const std::uint64_t h = hash(key);
    for (std::size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == static_cast<std::uint32_t>(h) && s.size == key.size() && view(s) == key) return s.id;
    }
  }
  std::size_t size() const { return size_; }
  std::size_t longest() const { return longest_; }  ///< the longest key, in bytes

private:
  struct Slot {
    std::uint32_t offset = 0, size = 0;
    std::int32_t id = -1;
    std::uint32_t hash = 0;
  };
  static std::uint64_t hash(std::string_view key) {  // FNV-1a, then a final mix
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ULL;
    return h ^ (h >> 29);
  }
  std::string_view view(const Slot& s) const { return std::string_view(arena_).substr(s.offset, s.size); }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<std::size_t>(16, old.size() * 2), Slot{});
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      for (std::size_t i = hash(view(s)) & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1))
        if (slots_[i].id < 0) {
          slots_[i] = s;
          break;
        }
    }
  }

  std::vector<Slot> slots_;
  std::string arena_;
  std::size_t size_ = 0, longest_ = 0;
};

} // namespace ftopt::text::detail
