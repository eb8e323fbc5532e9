// text/bert_tokenizer.hpp on a small vocabulary: BertNormalizer, BertPreTokenizer, the special
// tokens, truncation and padding, with expected ids worked out by hand from tokenizers' rules
// (tests/peer/bert.py checks the real vocabulary against BertTokenizerFast), the files it reads
// and bad input (random bytes and mutated files: tests/fuzz/readers.cpp).
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <ftopt/json.hpp>
#include <ftopt/text/bert_tokenizer.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {
// ids:                                    0        1        2        3        4         5
const std::vector<std::string> vocabulary{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello",
                                          // 6      7    8    9    10   11     12       13   14   15
                                          "world", ",", "!", "中", "文", "cafe", "##s", "naive", "a", "b"};
text::BertTokenizer small(text::BertTokenizerOptions options = {}) {
  return text::BertTokenizer(text::WordPiece(vocabulary, options.wordpiece), options);
}
using Ids = std::vector<std::int32_t>;
/// The vocabulary as tokenizer.json's model.vocab holds it: {token: id}.
nlohmann::json vocab_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (std::size_t i = 0; i < vocabulary.size(); ++i) vocab[vocabulary[i]] = i;
  return vocab;
}
} // namespace

TEST_CASE("BertTokenizer: lower-casing, accents, punctuation, CJK, [CLS] and [SEP]", "[text]") {
  const auto tok = small();
  CHECK(tok.encode("Hello, WORLD!") == Ids{2, 5, 7, 6, 8, 3});
  CHECK(tok.encode("Cafés naïve") == Ids{2, 11, 12, 13, 3});   // é and ï lose their accents
  CHECK(tok.encode("中文") == Ids{2, 9, 10, 3});                 // each ideograph a word
  CHECK(tok.encode("a\tb\nhello\u3000world") == Ids{2, 14, 15, 5, 6, 3});
  CHECK(tok.encode("a\x01\u200b" "b") == Ids{2, 1, 3});        // controls removed: "ab" is one unknown word
  CHECK(tok.encode("") == Ids{2, 3});
  CHECK(tok.encode("hello", {.add_special_tokens = false}) == Ids{5});
  CHECK(tok.tokenize("Hello, wörld") == std::vector<std::string>{"hello", ",", "world"});
}

TEST_CASE("BertTokenizer: special tokens in the text are matched as written", "[text]") {
  const auto tok = small();
  CHECK(tok.encode("a[SEP]b[MASK]") == Ids{2, 14, 3, 15, 4, 3});
  CHECK(tok.encode("[sep]") == Ids{2, 1, 1, 1, 3});  // lower case: "[", "sep", "]", none in the vocabulary
}

TEST_CASE("BertTokenizer: without lower-casing or accent stripping", "[text]") {
  const auto cased = small({.normalizer = {.lowercase = false}});
  CHECK(cased.encode("Hello hello") == Ids{2, 1, 5, 3});
  const auto accents = small({.normalizer = {.strip_accents = false}});
  CHECK(accents.encode("cafés") == Ids{2, 1, 3});  // "cafés" keeps its é: no piece matches
}

TEST_CASE("BertTokenizer: truncation keeps [SEP], and a batch pads to its longest", "[text]") {
  const auto tok = small();
  CHECK(tok.encode("a b a b a", {.max_length = 4}) == Ids{2, 14, 15, 3});
  const std::vector<std::string> texts{"a b a", "hello", ""};
  const auto batch = tok.encode_batch(texts);
  CHECK(batch.input_ids.sizes() == torch::IntArrayRef{3, 5});
  CHECK(torch::equal(batch.input_ids, torch::tensor({{2, 14, 15, 14, 3}, {2, 5, 3, 0, 0}, {2, 3, 0, 0, 0}})));
  CHECK(torch::equal(batch.attention_mask, torch::tensor({{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}, {1, 1, 0, 0, 0}})));
  const auto fixed = tok.encode_batch(texts, {.max_length = 8, .padding = text::Padding::MaxLength});
  CHECK(fixed.input_ids.size(1) == 8);
  CHECK(test::message_of([&] { tok.encode("a", {.max_length = 1}); }).find("max_length 1 leaves no room") !=
        std::string::npos);
}

TEST_CASE("BertTokenizer: text that is not UTF-8 names its source and the byte", "[text]") {
  const auto tok = small();
  const auto message = test::message_of([&] { tok.encode("price \xA3" "5", {}, "bbc/business/042.txt"); });
  CHECK(message.find("bbc/business/042.txt: not UTF-8 at byte 6 (0xa3)") != std::string::npos);
}

TEST_CASE("BertTokenizer: files, and what is wrong with them", "[text]") {
  test::ScratchDir dir("bert-tokenizer");
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir.path / name, std::ios::binary) << bytes;
    return dir.path / name;
  };
  std::string vocab_txt;
  for (const auto& t : vocabulary) vocab_txt += t + "\n";
  write("vocab.txt", vocab_txt);
  write("tokenizer_config.json", R"({"do_lower_case": false})");
  CHECK(text::BertTokenizer::from_pretrained(dir.path).encode("Hello hello") == Ids{2, 1, 5, 3});

  const nlohmann::json vocab = vocab_json();
  nlohmann::json file = {{"normalizer", {{"type", "BertNormalizer"}, {"lowercase", true}, {"strip_accents", nullptr}}},
                         {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
                         {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"vocab", vocab}}}};
  const auto json_path = write("tokenizer.json", file.dump());
  CHECK(text::BertTokenizer::from_pretrained(dir.path).encode("Hello hello") == Ids{2, 5, 5, 3});

  auto bad = [&](nlohmann::json changed) {
    const auto path = write("bad.json", changed.dump());
    return test::message_of([&] { text::BertTokenizer::from_tokenizer_json(path); });
  };
  auto other_model = file;
  other_model["model"]["type"] = "BPE";
  CHECK(bad(other_model).find("bad.json: model type 'BPE' is not WordPiece") != std::string::npos);
  auto other_normalizer = file;
  other_normalizer["normalizer"]["type"] = "NFKC";
  CHECK(bad(other_normalizer).find("normalizer type 'NFKC' is not BertNormalizer") != std::string::npos);
  auto no_vocab = file;
  no_vocab["model"].erase("vocab");
  CHECK(bad(no_vocab).find("model has no 'vocab'") != std::string::npos);
  auto twice = file;
  twice["model"]["vocab"]["hello"] = 0;
  CHECK(bad(twice).find("gives 'hello' the id 0") != std::string::npos);
  auto no_sep = file;
  no_sep["model"]["vocab"].erase("[SEP]");
  no_sep["model"]["vocab"]["zzz"] = 3;
  CHECK(bad(no_sep).find("no [SEP] token '[SEP]'") != std::string::npos);
  CHECK(test::message_of([&] { text::BertTokenizer::from_tokenizer_json(write("broken.json", "{\"model\": ")); })
            .find("broken.json: not valid JSON") != std::string::npos);
  std::filesystem::remove(json_path);
  std::filesystem::remove(dir.path / "vocab.txt");
  CHECK(test::message_of([&] { text::BertTokenizer::from_pretrained(dir.path); })
            .find("has neither tokenizer.json nor vocab.txt") != std::string::npos);
}
