// Tests for include/ftopt/text/bpe_files.hpp: a byte-level BPE read from a GGUF's metadata (as
// llama.cpp's converter writes it) and from a tokenizer.json (as tokenizers writes it) encodes
// alike; another model type or pre-tokenizer is an error naming the file and the value.
#include <catch2/catch.hpp>

#include <fstream>

#include <torch/torch.h>

#include <ftopt/json.hpp>
#include <ftopt/text/bpe_files.hpp>

#include "../support.hpp"
#include "../weights/gguf_builder.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
std::vector<std::string> byte_tokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    text::append_utf8(s, text::detail::byte_stand_ins()[static_cast<std::size_t>(b)]);
    tokens.push_back(s);
  }
  return tokens;
}
// "<|endoftext|>" 0, "<|im_start|>" 1, bytes 2..257, "Ġa" 258, "Ġab" 259.
std::vector<std::string> tokens() {
  std::vector<std::string> t = {"<|endoftext|>", "<|im_start|>"};
  for (auto& b : byte_tokens()) t.push_back(b);
  t.push_back("\u0120a");
  t.push_back("\u0120ab");
  return t;
}
const std::vector<std::string> merges = {"\u0120 a", "\u0120a b"};

test::GgufBuilder tokenizer_gguf(const std::string& model, const std::string& pre) {
  test::GgufBuilder g;
  std::vector<std::int32_t> types(tokens().size(), 1);
  types[0] = types[1] = 3;  // control
  g.string("tokenizer.ggml.model", model)
      .string("tokenizer.ggml.pre", pre)
      .strings("tokenizer.ggml.tokens", tokens())
      .strings("tokenizer.ggml.merges", merges)
      .i32s("tokenizer.ggml.token_type", types)
      .u32("tokenizer.ggml.bos_token_id", 1)
      .u32("tokenizer.ggml.eos_token_id", 0);
  return g;
}
} // namespace

TEST_CASE("BPE files: a GGUF's tokenizer and a tokenizer.json of the same vocabulary encode alike", "[text][bpe][gguf]") {
  const test::ScratchDir scratch("bpe-files");
  tokenizer_gguf("gpt2", "smollm").write(scratch.path / "model.gguf");
  const auto from_gguf = text::bpe_from_gguf(weights::Gguf(scratch.path / "model.gguf"));
  CHECK(from_gguf.vocabulary().pre_tokenizer == text::BpePreTokenizer::Gpt2Digits);
  CHECK((from_gguf.bos_id() == 1 && from_gguf.eos_id() == 0 && from_gguf.pad_id() == -1));

  nlohmann::json vocab = nlohmann::json::object();
  const auto t = tokens();
  for (std::size_t i = 2; i < t.size(); ++i) vocab[t[i]] = i;
  nlohmann::json j = {
      {"added_tokens", {{{"id", 0}, {"content", "<|endoftext|>"}, {"special", true}},
                        {{"id", 1}, {"content", "<|im_start|>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "Sequence"},
                         {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}},
                                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array({nlohmann::json::array({"\u0120", "a"}),
                                                                       nlohmann::json::array({"\u0120a", "b"})})}}}};
  std::ofstream(scratch.path / "tokenizer.json") << j.dump();
  std::ofstream(scratch.path / "tokenizer_config.json") << R"({"eos_token": "<|endoftext|>", "bos_token": null})";
  const auto from_json = text::bpe_from_tokenizer_json(scratch.path / "tokenizer.json");
  CHECK(from_json.eos_id() == 0);
  CHECK(from_json.bos_id() == -1);

  for (const std::string s : {"<|im_start|>ab ab 12 abc", " a<|endoftext|>"}) {
    const auto ids = from_gguf.encode(s);
    CHECK(ids == from_json.encode(s));
    CHECK(from_gguf.decode(ids) == s);
  }
  // Byte b is token b + 2; " ab" merges Ġ+a, then Ġa+b; the digits of "12" are words of their own.
  CHECK(from_gguf.encode("<|im_start|>a ab 12") == std::vector<std::int64_t>{1, 'a' + 2, 259, ' ' + 2, '1' + 2, '2' + 2});
}

TEST_CASE("BPE files: a vocabulary of another kind is an error naming the file and the value", "[text][bpe][gguf]") {
  const test::ScratchDir scratch("bpe-files-bad");
  const auto path = scratch.path / "model.gguf";
  tokenizer_gguf("llama", "default").write(path);
  CHECK_THAT(test::message_of([&] { text::bpe_from_gguf(weights::Gguf(path)); }),
             Contains("model.gguf: tokenizer.ggml.model is 'llama', not 'gpt2' (byte-level BPE); read a SentencePiece"));
  tokenizer_gguf("gpt2", "deepseek-llm").write(path);
  CHECK_THAT(test::message_of([&] { text::bpe_from_gguf(weights::Gguf(path)); }),
             Contains("model.gguf: tokenizer.ggml.pre is 'deepseek-llm'; ftopt's byte-level BPE splits text as GPT-2"));

  const auto json = scratch.path / "tokenizer.json";
  std::ofstream(json) << R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}, "pre_tokenizer": null})";
  CHECK_THAT(test::message_of([&] { text::bpe_from_tokenizer_json(json); }),
             Contains("tokenizer.json: model.type is 'WordPiece', not 'BPE'"));
  std::ofstream(json) << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                             "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}}})";
  CHECK_THAT(test::message_of([&] { text::bpe_from_tokenizer_json(json); }),
             Contains("tokenizer.json: pre_tokenizer {\"pattern\""));
  std::ofstream(json) << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "NFKC"},
                             "pre_tokenizer": {"type": "ByteLevel"}})";
  CHECK_THAT(test::message_of([&] { text::bpe_from_tokenizer_json(json); }),
             Contains("tokenizer.json: normalizer {\"type\":\"NFKC\"} is not one ftopt applies (none or NFC)"));
  std::ofstream(json) << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 5}, "merges": []}})";
  CHECK_THAT(test::message_of([&] { text::bpe_from_tokenizer_json(json); }),
             Contains("model.vocab gives 'b' the id 5, outside 0..1 or taken"));
}

TEST_CASE("BPE files: Llama 3's and Qwen2's pre-tokenizers from GGUF names and tokenizer.json patterns",
          "[text][bpe][gguf]") {
  const test::ScratchDir scratch("bpe-files-llama3");
  const auto path = scratch.path / "model.gguf";
  for (const auto& [pre, kind] : {std::pair{"llama-bpe", text::BpePreTokenizer::Llama3},
                                  std::pair{"qwen2", text::BpePreTokenizer::Qwen2}}) {
    tokenizer_gguf("gpt2", pre).write(path);
    const auto bpe = text::bpe_from_gguf(weights::Gguf(path));
    CHECK(bpe.vocabulary().pre_tokenizer == kind);
    // llama.cpp skips the merges of a word that is a token for Llama 3's family only.
    CHECK(bpe.vocabulary().ignore_merges == (kind == text::BpePreTokenizer::Llama3));
    CHECK_FALSE(bpe.vocabulary().nfc);
  }
  nlohmann::json vocab = nlohmann::json::object();
  const auto t = tokens();
  for (std::size_t i = 2; i < t.size(); ++i) vocab[t[i]] = i - 2;
  for (const auto& [pattern, kind] : {std::pair{text::llama3_pattern, text::BpePreTokenizer::Llama3},
                                      std::pair{text::qwen2_pattern, text::BpePreTokenizer::Qwen2}}) {
    const nlohmann::json j = {
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer", {{"type", "Sequence"},
                           {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", std::string(pattern)}}},
                                               {"behavior", "Isolated"}, {"invert", false}},
                                              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", true}}}};
    std::ofstream(scratch.path / "tokenizer.json") << j.dump();
    const auto bpe = text::bpe_from_tokenizer_json(scratch.path / "tokenizer.json");
    CHECK(bpe.vocabulary().pre_tokenizer == kind);
    CHECK(bpe.vocabulary().ignore_merges);
    CHECK(bpe.vocabulary().nfc);
  }
}
