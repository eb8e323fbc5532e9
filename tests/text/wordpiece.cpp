// text/wordpiece.hpp: greedy longest-match WordPiece, checked against splits worked out by hand
// from the algorithm (tokenizers' WordPiece::tokenize).
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <ftopt/text/wordpiece.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {
text::WordPiece small_vocab(text::WordPieceOptions options = {}) {
  return text::WordPiece({"[UNK]", "un", "unaff", "##aff", "##able", "##a", "##ble", "a", "é", "##é"}, options);
}
std::vector<std::int32_t> split(const text::WordPiece& wp, std::string_view word) {
  std::vector<std::int32_t> ids;
  wp.split(word, ids);
  return ids;
}
} // namespace

TEST_CASE("WordPiece: the longest piece first, continuations with ##", "[text]") {
  const auto wp = small_vocab();
  CHECK(split(wp, "unaffable") == std::vector<std::int32_t>{2, 4});  // unaff ##able (not un ##aff ##able)
  CHECK(split(wp, "unable") == std::vector<std::int32_t>{1, 4});
  CHECK(split(wp, "a") == std::vector<std::int32_t>{7});
  CHECK(split(wp, "aé") == std::vector<std::int32_t>{7, 9});  // multi-byte pieces end on code points
  CHECK(split(wp, "").empty());
}

TEST_CASE("WordPiece: a word with an unmatched part, or too long, is [UNK] as a whole", "[text]") {
  const auto wp = small_vocab({.max_input_chars_per_word = 5});
  CHECK(split(wp, "unx") == std::vector<std::int32_t>{0});     // un matched, then nothing for "x"
  CHECK(split(wp, "xun") == std::vector<std::int32_t>{0});
  CHECK(split(wp, "unable") == std::vector<std::int32_t>{0});  // 6 code points > 5
  CHECK(split(wp, "ééééé") == std::vector<std::int32_t>{8, 9, 9, 9, 9});  // 5 code points, 10 bytes
}

TEST_CASE("WordPiece: lookups", "[text]") {
  const auto wp = small_vocab();
  CHECK(wp.size() == 10);
  CHECK(wp.id_of("##able") == 4);
  CHECK(wp.id_of("able") == -1);
  CHECK(wp.token_of(2) == "unaff");
  CHECK(test::message_of([&] { wp.token_of(10); }).find("id 10 is outside the vocabulary of 10") != std::string::npos);
}

TEST_CASE("WordPiece: bad vocabularies name the file and the value", "[text]") {
  test::ScratchDir dir("wordpiece");
  const auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir.path / name, std::ios::binary) << bytes;
    return dir.path / name;
  };
  const auto no_unk = write("no_unk.txt", "[PAD]\nhello\n");
  CHECK(test::message_of([&] { text::WordPiece::from_vocab_file(no_unk); })
            .find(no_unk.string() + ": the vocabulary has no unknown token '[UNK]'") != std::string::npos);
  const auto blank = write("blank.txt", "[UNK]\n\nx\n");
  CHECK(test::message_of([&] { text::WordPiece::from_vocab_file(blank); }).find("line 2 is empty") != std::string::npos);
  CHECK(test::message_of([&] { text::WordPiece::from_vocab_file(dir.path / "missing.txt"); }).find("no such file") !=
        std::string::npos);
  const auto crlf = write("crlf.txt", "[UNK]\r\nab\r\n");
  CHECK(text::WordPiece::from_vocab_file(crlf).id_of("ab") == 1);
}
