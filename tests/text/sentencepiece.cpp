// Tests for include/ftopt/text/sentencepiece.hpp on a small vocabulary written here, each
// expected id worked out by hand from the rules (transformers' tokenizer for a Gemma GGUF: spaces
// as "▁", merges of adjacent pieces whose concatenation is a token ranked by the merged token's
// position or score then the longer left piece, byte fallback, added tokens cut out whole). The
// real Gemma 3 vocabulary against transformers on the BBC articles: tests/peer/families.py.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/text/gguf_tokenizer.hpp>
#include <ftopt/text/sentencepiece.hpp>

#include "../support.hpp"
#include "../weights/gguf_builder.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
// id: 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4 <start_of_turn> (control), 5 "\n\n" (user-defined),
// 6 "  " (user-defined, two spaces: respelled "▁▁"), 7 <0xC3>, 8 <0xA9> (bytes), then normal tokens.
std::vector<std::string> sp_tokens() {
  return {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "\n\n", "  ", "<0xC3>", "<0xA9>",
          "ab", "\u2581a", "a", "b", "c", "\u2581", "abc", "bc", "\u2581ab", "\n", "d"};
}
std::vector<std::int64_t> sp_types() { return {3, 3, 3, 2, 3, 4, 4, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}; }

text::SentencePieceBpe tokenizer(text::MergeOrder order, std::vector<double> scores = {}) {
  text::SentencePieceVocabulary v{.tokens = sp_tokens(), .scores = std::move(scores), .types = sp_types(), .order = order,
                                  .bos = 2, .eos = 1, .pad = 0, .unk = 3, .add_bos = true};
  if (v.scores.empty()) v.scores.assign(v.tokens.size(), 0.0);
  return text::SentencePieceBpe(std::move(v), "test vocabulary");
}
} // namespace

TEST_CASE("SentencePieceBpe: spaces as ▁, merges by position, byte fallback, added tokens whole", "[text]") {
  const auto sp = tokenizer(text::MergeOrder::Position);
  // "abc": the candidates are a+b -> "ab" (9) and b+c -> "bc" (16); "ab" comes first, then ab+c -> "abc" (15).
  CHECK(sp.encode("abc") == std::vector<std::int64_t>{2, 15});
  CHECK(sp.encode("abc", {}, /*add_bos=*/false) == std::vector<std::int64_t>{15});
  // " ab": ▁+a -> "▁a" (10) and a+b -> "ab" (9): "ab" first (position 9 < 10), then ▁+ab -> "▁ab" (17).
  CHECK(sp.encode(" ab", {}, false) == std::vector<std::int64_t>{17});
  // "é" is no token: its UTF-8 bytes C3 A9 as <0xC3> <0xA9>; "x" has neither: <unk>, twice fused to one.
  CHECK(sp.encode("\u00e9d", {}, false) == std::vector<std::int64_t>{7, 8, 19});
  CHECK(sp.encode("xxd", {}, false) == std::vector<std::int64_t>{3, 19});
  // Added tokens cut out first, the longest where two start at one place ("\n\n"; "\n" is a plain
  // token). The user-defined run of two spaces is respelled "▁▁" and is no added token: two
  // spaces are two "▁" pieces that merge into it.
  CHECK(sp.encode("a<start_of_turn>\n\n\nd", {}, false) == std::vector<std::int64_t>{11, 4, 5, 18, 19});
  CHECK(sp.id_of("\u2581\u2581") == 6);
  CHECK(sp.encode("  ", {}, false) == std::vector<std::int64_t>{6});
  // decode: ▁ as a space, byte tokens as their bytes, control tokens kept or skipped.
  CHECK(sp.decode(std::vector<std::int64_t>{17, 7, 8, 4, 6}) == " ab\u00e9<start_of_turn>  ");
  CHECK(sp.decode(std::vector<std::int64_t>{2, 17, 4}, /*skip_control=*/true) == " ab");
  CHECK_THAT(test::message_of([&] { sp.encode("a\xff", "prompt.txt"); }), Contains("prompt.txt"));
  CHECK_THAT(test::message_of([&] { sp.decode(std::vector<std::int64_t>{20}); }),
             Contains("test vocabulary: decode: token id 20 is outside the 20 tokens"));
}

TEST_CASE("SentencePieceBpe: merges by score, then the longer left piece", "[text]") {
  // Scores: "bc" (16) above "ab" (9): "abc" now merges b+c first, then a+bc -> "abc".
  std::vector<double> scores(20, -100.0);
  scores[9] = -5;    // ab
  scores[16] = -1;   // bc
  scores[15] = -3;   // abc
  scores[10] = -2;   // ▁a
  scores[17] = -4;   // ▁ab
  const auto sp = tokenizer(text::MergeOrder::Score, scores);
  CHECK(sp.encode("abc", {}, false) == std::vector<std::int64_t>{15});
  // " abc": b+c -> "bc" (-1) first; then ▁+a -> "▁a" (-2) before a+bc -> "abc" (-3), which it
  // takes the "a" from; "▁a" + "bc" is no token, so two pieces stay.
  CHECK(sp.encode(" abc", {}, false) == std::vector<std::int64_t>{10, 16});
}

TEST_CASE("SentencePieceBpe from a GGUF: its metadata, and what ftopt refuses", "[text][gguf]") {
  const test::ScratchDir scratch("sentencepiece-gguf");
  auto build = [&](const std::string& name, bool prefix, bool scores) {
    std::vector<std::int32_t> kinds;
    for (const auto t : sp_types()) kinds.push_back(static_cast<std::int32_t>(t));
    test::GgufBuilder g;
    g.string("general.architecture", "gemma3").string("tokenizer.ggml.model", "llama")
        .strings("tokenizer.ggml.tokens", sp_tokens()).i32s("tokenizer.ggml.token_type", kinds)
        .u32("tokenizer.ggml.bos_token_id", 2).u32("tokenizer.ggml.eos_token_id", 1)
        .u32("tokenizer.ggml.unknown_token_id", 3).u32("tokenizer.ggml.padding_token_id", 0)
        .boolean("tokenizer.ggml.add_bos_token", true).boolean("tokenizer.ggml.add_space_prefix", prefix);
    if (scores) g.f32s("tokenizer.ggml.scores", std::vector<float>(sp_tokens().size(), 0.0F));
    g.write(scratch.path / name);
    return scratch.path / name;
  };
  const auto sp = text::sentencepiece_from_gguf(weights::Gguf(build("good.gguf", false, true)));
  CHECK(sp.vocabulary().order == text::MergeOrder::Position);  // gemma3: by position
  CHECK(sp.encode(" ab") == std::vector<std::int64_t>{2, 17});
  CHECK(sp.bos_id() == 2);
  CHECK(sp.eos_id() == 1);
  CHECK_THAT(test::message_of([&] { text::sentencepiece_from_gguf(weights::Gguf(build("prefix.gguf", true, true))); }),
             Contains("prefix.gguf: tokenizer.ggml.add_space_prefix is true; ftopt's SentencePiece reads vocabularies "
                      "without the leading"));
  CHECK_THAT(test::message_of([&] { text::sentencepiece_from_gguf(weights::Gguf(build("scoreless.gguf", false, false))); }),
             Contains("scoreless.gguf: the SentencePiece vocabulary has no tokenizer.ggml.scores"));
  // text::GgufTokenizer takes the kind the file names; its encode adds no <bos> (templates write it).
  const text::GgufTokenizer any(weights::Gguf(scratch.path / "good.gguf"));
  CHECK(any.encode(" ab") == std::vector<std::int64_t>{17});
  CHECK(any.adds_bos());
  CHECK(any.bos_id() == 2);
  CHECK(any.decode(std::vector<std::int64_t>{2, 17}, /*skip_special=*/true) == " ab");
  test::GgufBuilder other;
  other.string("general.architecture", "bert").string("tokenizer.ggml.model", "bert");
  other.write(scratch.path / "bert.gguf");
  CHECK_THAT(test::message_of([&] { text::GgufTokenizer(weights::Gguf(scratch.path / "bert.gguf")); }),
             Contains("bert.gguf: tokenizer.ggml.model is 'bert'; ftopt reads 'gpt2' (byte-level BPE) and 'llama' "
                      "(SentencePiece)"));
}
