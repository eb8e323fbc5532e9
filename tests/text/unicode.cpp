// text/unicode.hpp: UTF-8 decoding with the first bad byte named, and BERT's character classes
// (Unicode 8.0 categories from ICU, Rust's white space and lower-casing).
#include <string>

#include <catch2/catch.hpp>

#include <ftopt/text/unicode.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {
/// Code points as integers, which Catch can print.
std::vector<std::uint32_t> codes(const std::vector<char32_t>& cps) { return {cps.begin(), cps.end()}; }
} // namespace

TEST_CASE("decode_utf8: one to four bytes", "[text]") {
  const auto cps = text::decode_utf8("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");  // a é 中 😀
  REQUIRE(codes(cps) == std::vector<std::uint32_t>{'a', 0xE9, 0x4E2D, 0x1F600});
  std::string back;
  for (auto cp : cps) text::append_utf8(back, cp);
  CHECK(back == "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
}

TEST_CASE("decode_utf8: bytes that are not UTF-8 name the source and the offset", "[text]") {
  struct Case {
    std::string bytes;
    std::size_t at;
  };
  for (const auto& [bytes, at] : {Case{"ab\xA3", 2},                // a stray continuation byte (Latin-1 pound)
                                  Case{"x\xC3", 1},                 // truncated
                                  Case{"\xC0\xAF", 0},              // overlong '/'
                                  Case{"ok\xED\xA0\x80", 2},        // a surrogate
                                  Case{"\xF4\x90\x80\x80", 0},      // above U+10FFFF
                                  Case{"\xE4\xB8z", 0},             // a continuation byte missing
                                  Case{"\xFF", 0}}) {
    const auto message = test::message_of([&] { text::decode_utf8(bytes, "news/001.txt"); });
    INFO(message);
    CHECK(message.find("news/001.txt: not UTF-8 at byte " + std::to_string(at)) != std::string::npos);
  }
}

TEST_CASE("BERT's classes: categories as of Unicode 8.0", "[text]") {
  CHECK(text::is_bert_punctuation(U'!'));
  CHECK(text::is_bert_punctuation(U'$'));   // ASCII punctuation although Unicode calls it a symbol (Sc)
  CHECK(text::is_bert_punctuation(U'`'));
  CHECK(text::is_bert_punctuation(0xBF));   // ¿ (Po)
  CHECK(text::is_bert_punctuation(0x2014)); // em dash (Pd)
  CHECK_FALSE(text::is_bert_punctuation(U'a'));
  CHECK_FALSE(text::is_bert_punctuation(0x2E45));  // Po, but assigned in Unicode 10
  CHECK(text::is_bert_control(0x200B));     // zero width space (Cf)
  CHECK(text::is_bert_control(0xE000));     // private use
  CHECK(text::is_bert_control(0x85));       // NEL (Cc): a control before it is white space
  CHECK_FALSE(text::is_bert_control(U'\n'));
  CHECK_FALSE(text::is_bert_control(0x08E2));  // Cf, but assigned in Unicode 9
  CHECK(text::is_bert_nonspacing_mark(0x301));
  CHECK_FALSE(text::is_bert_nonspacing_mark(0x08D4));  // Mn, assigned in Unicode 9
  CHECK(text::is_white_space(0x3000));
  CHECK(text::is_white_space(0xA0));
  CHECK_FALSE(text::is_white_space(0x200B));
  CHECK(text::is_bert_chinese(0x4E2D));
  CHECK_FALSE(text::is_bert_chinese(0x3042));  // hiragana
}

TEST_CASE("NFD, mark order and lower-casing as Rust's char::to_lowercase", "[text]") {
  std::vector<char32_t> out;
  text::append_nfd(out, 0xE9);  // é -> e + U+0301
  CHECK(codes(out) == std::vector<std::uint32_t>{'e', 0x301});
  out.clear();
  text::append_nfd(out, 0xAC00);  // Hangul GA -> two jamo
  CHECK(out.size() == 2);
  std::vector<char32_t> marks{U'e', 0x301, 0x316};  // acute (230) before grave below (220)
  text::order_marks(marks);
  CHECK(codes(marks) == std::vector<std::uint32_t>{'e', 0x316, 0x301});
  out.clear();
  text::append_lowercase(out, 0x130);  // İ -> i + combining dot
  text::append_lowercase(out, 0x3A3);  // Σ -> σ (no final-sigma context per character)
  text::append_lowercase(out, U'Q');
  CHECK(codes(out) == std::vector<std::uint32_t>{'i', 0x307, 0x3C3, 'q'});
}
