#pragma once
/// What the tokenizers ask of Unicode: UTF-8 decoding that names the first bad byte, and the
/// character classes of Hugging Face's BERT normalizer and pre-tokenizer, answered by ICU (the
/// system's libicu; why ICU: docs/build.md).
///
/// `tokenizers` (the Rust library behind BertTokenizerFast) takes general categories from the
/// `unicode_categories` crate, whose tables are those of Unicode 8.0, while lower-casing and
/// white space come from Rust's own, current tables. So `bert_category` answers a code point's
/// category as Unicode 8.0 had it (a character assigned later counts as unassigned: it is not a
/// control, a punctuation mark or a non-spacing mark to BERT), from ICU's category and age.
///
///   auto cps = ftopt::text::decode_utf8(bytes, "bbc/tech/001.txt");  // throws on bad UTF-8

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf16.h>

#include <ftopt/error.hpp>

namespace ftopt::text {

/// Decodes one code point at `bytes[i]`, advancing i; -1 where the bytes there are not UTF-8
/// (a stray continuation byte, a truncated or overlong sequence, a surrogate, > U+10FFFF).
inline char32_t next_code_point(std::string_view bytes, std::size_t& i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  std::size_t n;
  char32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) n = 1, cp = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) n = 2, cp = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) n = 3, cp = b0 & 0x07, min = 0x10000;
  else return static_cast<char32_t>(-1);
  if (i + n >= bytes.size()) return static_cast<char32_t>(-1);
  for (std::size_t k = 1; k <= n; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) return static_cast<char32_t>(-1);
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return static_cast<char32_t>(-1);
  i += n + 1;
  return cp;
}

/// The number of code points of UTF-8 `bytes` (its bytes that are not continuation bytes).
inline std::size_t code_point_count(std::string_view bytes) {
  std::size_t n = 0;
  for (const unsigned char c : bytes) n += (c & 0xC0) != 0x80;
  return n;
}

/// Throws ftopt::Error naming `source` and the byte offset of the first byte that is not UTF-8.
[[noreturn]] inline void fail_utf8(std::string_view bytes, std::size_t at, std::string_view source) {
  fail(source.empty() ? std::string_view("text") : source, ": not UTF-8 at byte ", at, " (0x", std::hex,
       static_cast<int>(static_cast<unsigned char>(bytes[at])), std::dec,
       "); decode the text to UTF-8 before tokenizing it");
}

/// The code points of UTF-8 `bytes`; bad UTF-8 throws, naming `source` and the byte offset.
inline std::vector<char32_t> decode_utf8(std::string_view bytes, std::string_view source = {}) {
  std::vector<char32_t> out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t at = i;
    const char32_t cp = next_code_point(bytes, i);
    if (cp == static_cast<char32_t>(-1)) fail_utf8(bytes, at, source);
    out.push_back(cp);
  }
  return out;
}

/// Appends code point `cp` to `out` as UTF-8.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// The general category (ICU's UCharCategory) of `cp` as Unicode 8.0 had it: U_UNASSIGNED for a
/// code point assigned in a later version.
inline std::int8_t bert_category(char32_t cp) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(cp), age);
  if (age[0] > 8) return U_UNASSIGNED;
  return u_charType(static_cast<UChar32>(cp));
}

/// White space as Rust's char::is_whitespace (Unicode's White_Space property).
inline bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r');
  return u_isUWhiteSpace(static_cast<UChar32>(cp));
}

/// BERT's white space: \t, \n, \r and White_Space.
inline bool is_bert_whitespace(char32_t cp) { return is_white_space(cp); }

/// BERT's control characters (removed by the normalizer): Cc, Cf, Co and Cs as of Unicode 8.0,
/// but not \t, \n or \r, which count as white space.
inline bool is_bert_control(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  if (cp < 0x80) return cp < 0x20 || cp == 0x7F;
  const auto c = bert_category(cp);
  return c == U_CONTROL_CHAR || c == U_FORMAT_CHAR || c == U_PRIVATE_USE_CHAR || c == U_SURROGATE;
}

/// BERT's punctuation (split off as words of their own): ASCII punctuation, and the P*
/// categories as of Unicode 8.0.
inline bool is_bert_punctuation(char32_t cp) {
  if (cp < 0x80) return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
                        (cp >= 123 && cp <= 126);
  switch (bert_category(cp)) {
  case U_CONNECTOR_PUNCTUATION: case U_DASH_PUNCTUATION: case U_START_PUNCTUATION: case U_END_PUNCTUATION:
  case U_INITIAL_PUNCTUATION: case U_FINAL_PUNCTUATION: case U_OTHER_PUNCTUATION:
    return true;
  default:
    return false;
  }
}

/// A non-spacing mark (Mn) as of Unicode 8.0: what BERT's accent stripping removes after NFD.
inline bool is_bert_nonspacing_mark(char32_t cp) { return cp >= 0x300 && bert_category(cp) == U_NON_SPACING_MARK; }

/// The CJK ideograph blocks that BERT's normalizer surrounds with spaces (BERT's own list).
inline bool is_bert_chinese(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/// Appends the canonical decomposition (NFD) of `cp` to `out`, without reordering marks.
inline void append_nfd(std::vector<char32_t>& out, char32_t cp) {
  if (cp < 0xC0) {
    out.push_back(cp);
    return;
  }
  UErrorCode status = U_ZERO_ERROR;
  static const UNormalizer2* nfd = unorm2_getNFDInstance(&status);
  check(U_SUCCESS(status), "text: ICU has no NFD data (", u_errorName(status), ")");
  UChar buffer[32];
  status = U_ZERO_ERROR;
  const int32_t n = unorm2_getDecomposition(nfd, static_cast<UChar32>(cp), buffer, 32, &status);
  if (n < 0 || U_FAILURE(status)) {
    out.push_back(cp);
    return;
  }
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U16_NEXT(buffer, i, n, c);
    out.push_back(static_cast<char32_t>(c));
  }
}

/// The NFC form of code points `cps` as UTF-8, or nullopt where they are in NFC already (ICU's
/// normalizer).
inline std::optional<std::string> nfc_if_changed(std::span<const char32_t> cps) {
  UErrorCode status = U_ZERO_ERROR;
  static const UNormalizer2* composer = unorm2_getNFCInstance(&status);
  check(U_SUCCESS(status), "text: ICU has no NFC data (", u_errorName(status), ")");
  std::u16string in;
  for (const char32_t cp : cps) {
    if (cp < 0x10000) {
      in.push_back(static_cast<char16_t>(cp));
    } else {
      in.push_back(static_cast<char16_t>(0xD800 + ((cp - 0x10000) >> 10)));
      in.push_back(static_cast<char16_t>(0xDC00 + ((cp - 0x10000) & 0x3FF)));
    }
  }
  status = U_ZERO_ERROR;
  const auto* data = reinterpret_cast<const UChar*>(in.data());
  const auto length = static_cast<int32_t>(in.size());
  if (unorm2_isNormalized(composer, data, length, &status) && U_SUCCESS(status)) return std::nullopt;
  status = U_ZERO_ERROR;
  std::u16string out(in.size() * 3 + 16, u'\0');
  const int32_t n = unorm2_normalize(composer, data, length, reinterpret_cast<UChar*>(out.data()),
                                     static_cast<int32_t>(out.size()), &status);
  check(U_SUCCESS(status), "text: NFC failed (", u_errorName(status), ")");
  std::string result;
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U16_NEXT(out.data(), i, n, c);
    append_utf8(result, static_cast<char32_t>(c));
  }
  return result;
}

/// The NFC form of UTF-8 text (bad UTF-8 throws, as decode_utf8).
inline std::string nfc(std::string_view utf8) {
  auto composed = nfc_if_changed(decode_utf8(utf8));
  return composed ? std::move(*composed) : std::string(utf8);
}

/// Sorts each run of combining marks of `cps` (canonical combining class > 0) by class, stably:
/// the canonical ordering that completes NFD.
inline void order_marks(std::vector<char32_t>& cps) {
  for (std::size_t i = 1; i < cps.size(); ++i) {
    const auto ccc = u_getCombiningClass(static_cast<UChar32>(cps[i]));
    if (ccc == 0) continue;
    for (std::size_t j = i; j > 0; --j) {
      const auto before = u_getCombiningClass(static_cast<UChar32>(cps[j - 1]));
      if (before <= ccc) break;
      std::swap(cps[j - 1], cps[j]);
    }
  }
}

/// Rust's char::to_lowercase: the simple mapping, except U+0130 (I with dot above), which
/// lower-cases to two code points.
inline void append_lowercase(std::vector<char32_t>& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
  } else if (cp == 0x130) {
    out.push_back('i');
    out.push_back(0x307);
  } else {
    out.push_back(static_cast<char32_t>(u_tolower(static_cast<UChar32>(cp))));
  }
}

} // namespace ftopt::text
