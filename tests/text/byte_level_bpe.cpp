// Tests for include/ftopt/text/byte_level_bpe.hpp: the words GPT-2's pattern cuts (expected
// values from tokenizers 0.23's pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
// and Sequence([Digits(individual_digits=True), ByteLevel(...)]).pre_tokenize_str, turned back
// from byte stand-ins to text), and those Llama 3's and Qwen2's patterns cut (tokenizers'
// Split(Regex(pattern), behavior="isolated").pre_tokenize_str), merges by rank, ignore_merges,
// NFC, added tokens, UTF-8 errors and decode. The real
// SmolLM2 vocabulary on the BBC corpus against `tokenizers`: tests/peer/llama.py.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/text/byte_level_bpe.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
/// Every byte's stand-in as a token (ids 0..255), then `extra` tokens; merges as given.
text::BpeVocabulary byte_vocabulary(std::vector<std::string> extra = {}, std::vector<std::string> merges = {},
                                    text::BpePreTokenizer pre = text::BpePreTokenizer::Gpt2) {
  text::BpeVocabulary v;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    text::append_utf8(s, text::detail::byte_stand_ins()[static_cast<std::size_t>(b)]);
    v.tokens.push_back(s);
  }
  for (auto& t : extra) v.tokens.push_back(std::move(t));
  v.merges = std::move(merges);
  v.pre_tokenizer = pre;
  return v;
}
} // namespace

TEST_CASE("ByteLevelBpe: GPT-2's pattern cuts the words tokenizers cuts", "[text][bpe]") {
  const text::ByteLevelBpe gpt2(byte_vocabulary(), "test");
  const text::ByteLevelBpe digits(byte_vocabulary({}, {}, text::BpePreTokenizer::Gpt2Digits), "test");
  using Words = std::vector<std::string>;
  CHECK(gpt2.words("Hello world") == Words{"Hello", " world"});
  CHECK(gpt2.words("it's 2024: 12.5%!") == Words{"it", "'s", " 2024", ":", " 12", ".", "5", "%!"});
  CHECK(digits.words("it's 2024: 12.5%!") ==
        Words{"it", "'s", " ", "2", "0", "2", "4", ":", " ", "1", "2", ".", "5", "%!"});
  CHECK(gpt2.words("  two  spaces\n\nand\ttabs  ") ==
        Words{" ", " two", " ", " spaces", "\n", "\n", "and", "\t", "tabs", "  "});
  CHECK(gpt2.words("I'm   'Re' they'LL") == Words{"I", "'m", "  ", " '", "Re", "'", " they", "'", "LL"});
  CHECK(gpt2.words("x \u00a0y\u3000z") == Words{"x", " ", "\u00a0", "y", "\u3000", "z"});
  CHECK(gpt2.words("中文 字符😀!?") == Words{"中文", " 字符", "😀!?"});
  CHECK(gpt2.words("١٢٣ ½") == Words{"١٢٣", " ½"});
  CHECK(digits.words("١٢٣ ½") == Words{"١", "٢", "٣", " ", "½"});
  // Without merges every byte is its own token.
  const auto ids = gpt2.encode("é!");
  CHECK(ids == std::vector<std::int64_t>{0xC3, 0xA9, '!'});
}

TEST_CASE("ByteLevelBpe: Llama 3's and Qwen2's patterns cut the words tokenizers cuts", "[text][bpe]") {
  const text::ByteLevelBpe llama3(byte_vocabulary({}, {}, text::BpePreTokenizer::Llama3), "test");
  const text::ByteLevelBpe qwen2(byte_vocabulary({}, {}, text::BpePreTokenizer::Qwen2), "test");
  using Words = std::vector<std::string>;
  CHECK(llama3.words("Hello world") == Words{"Hello", " world"});
  CHECK(llama3.words("it's 2024: 12.5%!") == Words{"it", "'s", " ", "202", "4", ":", " ", "12", ".", "5", "%!"});
  CHECK(qwen2.words("it's 2024: 12.5%!") ==
        Words{"it", "'s", " ", "2", "0", "2", "4", ":", " ", "1", "2", ".", "5", "%!"});
  CHECK(llama3.words("I'M   'Re' they'LL 'still") ==
        Words{"I", "'M", "  ", " '", "Re", "'", " they", "'LL", " '", "still"});
  CHECK(llama3.words("(hello) [x]\tword") == Words{"(hello", ")", " [", "x", "]", "\tword"});
  CHECK(llama3.words("  two  spaces\n\n  and\ttabs  ") ==
        Words{" ", " two", " ", " spaces", "\n\n", " ", " and", "\ttabs", "  "});
  CHECK(llama3.words("x \r\n\r\n y") == Words{"x", " \r\n\r\n", " y"});
  CHECK(llama3.words("1234567 ١٢٣٤") == Words{"123", "456", "7", " ", "١٢٣", "٤"});
  CHECK(qwen2.words("1234567") == Words{"1", "2", "3", "4", "5", "6", "7"});
  CHECK(llama3.words("a.\n\nb") == Words{"a", ".\n\n", "b"});
  CHECK(llama3.words("'ſx Don'T 'Sx x'sy") == Words{"'ſ", "x", " Don", "'T", " '", "Sx", " x", "'s", "y"});
  CHECK(llama3.words("中文 字符😀!?\n") == Words{"中文", " 字符", "😀!?\n"});
}

TEST_CASE("ByteLevelBpe: ignore_merges takes a word that is a token whole, nfc composes first", "[text][bpe]") {
  // "ab" is a token, but no merge makes it: merged, "ab" is two tokens; with ignore_merges, one.
  auto v = byte_vocabulary({"ab"});
  CHECK(text::ByteLevelBpe(v, "test").encode("ab") == std::vector<std::int64_t>{'a', 'b'});
  v.ignore_merges = true;
  CHECK(text::ByteLevelBpe(v, "test").encode("ab") == std::vector<std::int64_t>{256});
  // e + U+0301 (combining acute) composes to U+00E9 under NFC: the same bytes as the precomposed text.
  auto n = byte_vocabulary();
  const text::ByteLevelBpe plain(n, "test");
  n.nfc = true;
  const text::ByteLevelBpe composing(n, "test");
  CHECK(composing.encode("café") == plain.encode("café"));
  CHECK(plain.encode("café") != plain.encode("café"));
  CHECK(text::nfc("é Å") == "é Å");  // U+212B ANGSTROM SIGN is A with ring in NFC
}

TEST_CASE("ByteLevelBpe: merges apply lowest rank first, leftmost among equals", "[text][bpe]") {
  // "abc" with "b c" ranked before "a b": a + bc, then abc.
  const text::ByteLevelBpe bc_first(byte_vocabulary({"bc", "ab", "abc"}, {"b c", "a b", "a bc"}), "test");
  CHECK(bc_first.encode("abc") == std::vector<std::int64_t>{258});
  // "a b" first: ab + c, and no merge joins them.
  const text::ByteLevelBpe ab_first(byte_vocabulary({"bc", "ab", "abc"}, {"a b", "b c", "a bc"}), "test");
  CHECK(ab_first.encode("abc") == std::vector<std::int64_t>{257, 'c'});
  // "aaa": the leftmost pair merges first.
  const text::ByteLevelBpe aa(byte_vocabulary({"aa"}, {"a a"}), "test");
  CHECK(aa.encode("aaa") == std::vector<std::int64_t>{256, 'a'});
  // A space is Ġ (U+0120) in the vocabulary's spelling.
  const text::ByteLevelBpe space(byte_vocabulary({"\u0120a"}, {"\u0120 a"}), "test");
  CHECK(space.encode("a a") == std::vector<std::int64_t>{'a', 256});
  CHECK(space.decode(space.encode("a a")) == "a a");
}

TEST_CASE("ByteLevelBpe: added tokens are cut out whole, the longest first", "[text][bpe]") {
  auto v = byte_vocabulary({"<|im_start|>", "<|im_start|>x", "<|end|>"});
  v.added = {256, 257, 258};
  v.eos = 258;
  const text::ByteLevelBpe bpe(v, "test");
  CHECK(bpe.encode("<|im_start|>xy<|end|>") == std::vector<std::int64_t>{257, 'y', 258});
  CHECK(bpe.encode("a<|im_start|>b") == std::vector<std::int64_t>{'a', 256, 'b'});
  CHECK(bpe.words("hi <|end|> there") == std::vector<std::string>{"hi", " ", "<|end|>", " there"});
  const auto ids = bpe.encode("a<|im_start|>b");
  CHECK(bpe.decode(ids) == "a<|im_start|>b");
  CHECK(bpe.decode(ids, /*skip_added=*/true) == "ab");
  CHECK(bpe.eos_id() == 258);
}

TEST_CASE("ByteLevelBpe: any bytes decode back, and text that is not UTF-8 and bad vocabularies are errors", "[text][bpe]") {
  const text::ByteLevelBpe bpe(byte_vocabulary(), "vocab.gguf");
  std::vector<std::int64_t> all(256);
  for (int b = 0; b < 256; ++b) all[static_cast<std::size_t>(b)] = b;
  const std::string bytes = bpe.decode(all);
  REQUIRE(bytes.size() == 256);
  for (int b = 0; b < 256; ++b) CHECK(static_cast<unsigned char>(bytes[static_cast<std::size_t>(b)]) == b);

  CHECK_THAT(test::message_of([&] { bpe.encode("caf\xE9 ok", "bbc/tech/001.txt"); }),
             Contains("bbc/tech/001.txt: not UTF-8 at byte 3 (0xe9)"));
  CHECK_THAT(test::message_of([&] { bpe.decode(std::vector<std::int64_t>{300}); }),
             Contains("vocab.gguf: decode: token id 300 is outside the 256 tokens"));
  CHECK_THAT(test::message_of([&] { text::ByteLevelBpe(byte_vocabulary({}, {"a zz"}), "vocab.gguf"); }),
             Contains("vocab.gguf: merge 0 'a zz' names a token the vocabulary lacks"));
  CHECK_THAT(test::message_of([&] { text::ByteLevelBpe(byte_vocabulary({}, {"ab"}), "vocab.gguf"); }),
             Contains("merge 0 'ab' is not two tokens separated by one space"));
  text::BpeVocabulary ascii;
  ascii.tokens = {"a", "b"};
  const text::ByteLevelBpe small(ascii, "small.json");
  CHECK(small.encode("ab") == std::vector<std::int64_t>{0, 1});
  CHECK_THAT(test::message_of([&] { small.encode("c"); }), Contains("small.json: the vocabulary has no token for the byte 0x63"));
}
