// The fuzz tests of every file reader, on the one harness of tests/fuzz.hpp: each starts from a
// small good file (built here byte by byte, or a fixture of tests/fixtures/) and feeds its reader
// that file cut short and mutated; every attempt must read or throw ftopt::Error. All of them are
// in this one source so that the sanitizer build (asan.fuzz, tests/CMakeLists.txt) compiles
// little: the unit run does FTOPT_FUZZ_MUTATIONS (else 300) mutations per file, asan.fuzz 2000
// under AddressSanitizer and UndefinedBehaviorSanitizer.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <ftopt/json.hpp>

#include <ftopt/data/idx.hpp>
#include <ftopt/data/text_set.hpp>
#include <ftopt/peft/files/lora.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/pipeline/jpeg.hpp>
#include <ftopt/storage/ggml.hpp>
#include <ftopt/text/bert_tokenizer.hpp>
#include <ftopt/text/sentencepiece.hpp>
#include <ftopt/text/bpe_files.hpp>
#include <ftopt/weights/gguf.hpp>
#include <ftopt/weights/safetensors.hpp>
#include <ftopt/weights/torch_file.hpp>

#include "../data/idx_files.hpp"
#include "../fuzz.hpp"
#include "../support.hpp"
#include "../weights/gguf_builder.hpp"

using namespace ftopt;

// Named, not anonymous: the unit build compiles this file in a unity batch with others, whose
// anonymous helpers (sample(), tokens(), ...) would collide with these.
namespace fuzz_readers {

using Path = std::filesystem::path;
using storage::ggml::Type;

/// Bytes that keep a mutated JSON file JSON more often.
constexpr const char* json_alphabet = "{}[]\":,0123456789.-e tfn\\";

std::string bytes_of(const Path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void write(const Path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Where a GGUF file's tensor data begins (its header ends): the first tensor's offset.
std::size_t gguf_data_start(const Path& scratch, const std::string& good) {
  write(scratch, good);
  const weights::Gguf file(scratch);
  REQUIRE(!file.tensors().empty());
  std::uint64_t start = good.size();
  for (const auto& t : file.tensors()) start = std::min(start, t.offset);
  return static_cast<std::size_t>(start);
}

/// A GGUF file's tensors, each dequantized, and its metadata, each value visited.
void read_gguf(const Path& path) {
  const weights::Gguf file(path);
  for (const auto& t : file.tensors()) {
    std::int64_t numel = 1;
    for (const auto d : t.shape) numel *= d;
    const at::Tensor values = file.dequantize(t.name);  // outside REQUIRE: its ftopt::Error is a refusal
    REQUIRE(values.numel() == numel);
  }
  for (const auto& [key, value] : file.metadata())
    for (const auto& item : value.items) std::visit([](const auto& v) { (void)v; }, item);
}

/// Where a safetensors file's data begins: 8 bytes of header length, then the header.
std::size_t safetensors_data_start(const std::string& bytes) {
  REQUIRE(bytes.size() >= 8);
  std::uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  return static_cast<std::size_t>(8 + length);
}

/// BertTokenizer's test vocabulary (tests/text/bert_tokenizer.cpp's).
const std::vector<std::string>& bert_vocabulary() {
  static const std::vector<std::string> vocabulary{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",",
                                                   "!", "中", "文", "cafe", "##s", "naive", "a", "b"};
  return vocabulary;
}
/// The ids of a text with accents, CJK, punctuation and a special token all lie in the vocabulary.
void encode_with_bert(const text::BertTokenizer& tok) {
  for (const auto id : tok.encode("Hello, wörld! 中文 Cafés naïve [SEP] ab"))
    REQUIRE((id >= 0 && id < tok.vocab_size()));
}

/// A byte-level BPE vocabulary (tests/text/bpe_files.cpp's): "<|endoftext|>" 0, "<|im_start|>" 1,
/// the 256 byte stand-ins 2..257, "Ġa" 258, "Ġab" 259; the merges "Ġ a" and "Ġa b".
std::vector<std::string> bpe_tokens() {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>"};
  for (std::size_t b = 0; b < 256; ++b) {
    std::string s;
    text::append_utf8(s, text::detail::byte_stand_ins()[b]);
    tokens.push_back(s);
  }
  tokens.push_back("\u0120a");
  tokens.push_back("\u0120ab");
  return tokens;
}
const std::vector<std::string> bpe_merges = {"\u0120 a", "\u0120a b"};

void encode_with_bpe(const text::ByteLevelBpe& bpe) {
  for (const auto id : bpe.encode("<|im_start|>ab ab 12 abc\n<|endoftext|>")) REQUIRE((id >= 0 && id < bpe.size()));
}

} // namespace fuzz_readers

TEST_CASE("GGUF: fuzz: mutated and truncated files are errors, never crashes", "[fuzz][weights][gguf]") {
  const test::ScratchDir scratch("fuzz-gguf");
  // Metadata of each kind and one tensor of each unquantized type, Q4_1, Q4_0 and Q8_0 (the
  // K-quants: the next test).
  const std::string good = test::sample_gguf().bytes();

  const auto outcome = test::fuzz::run(good, test::fuzz::through_file(scratch.path / "fuzz.gguf", fuzz_readers::read_gguf),
                                       {.header = fuzz_readers::gguf_data_start(scratch.path / "good.gguf", good)});
  CHECK(outcome.refused > 0);
  CHECK(outcome.read > 0);  // some mutations land in tensor values, which read as other numbers
}

TEST_CASE("GGUF: fuzz: mutated Q4_K, Q6_K, Q5_0, Q5_1, Q8_0 and Q4_1 tensors dequantize or are errors",
          "[fuzz][weights][gguf]") {
  const test::ScratchDir scratch("fuzz-gguf-k-quants");
  // Blocks of fixed random bytes (ggml-common.h's layouts, storage/ggml.hpp) under scales that
  // are ordinary numbers: Q4_K d, dmin, 12 bytes of 6-bit scales and mins, 128 of nibbles; Q6_K
  // 128 bytes of low nibbles, 64 of high pairs, 16 int8 scales, d; Q5_0 d, 4 bytes of fifth bits,
  // 16 of nibbles; Q5_1 d, m, then the same.
  std::mt19937 draw(5);
  auto random_bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(draw());
    return s;
  };
  std::string q4_k;
  for (int b = 0; b < 2; ++b) q4_k += test::half_bytes(0.25F) + test::half_bytes(0.125F) + random_bytes(12 + 128);
  const std::string q6_k = random_bytes(128 + 64 + 16) + test::half_bytes(0.5F);
  const std::string q5_0 = test::half_bytes(0.25F) + random_bytes(4 + 16);
  const std::string q5_1 = test::half_bytes(0.5F) + test::half_bytes(-1.0F) + random_bytes(4 + 16);
  std::vector<int> q(32), codes(32);
  for (int j = 0; j < 32; ++j) q[j] = j * 8 - 128, codes[j] = (j * 5) % 16;
  test::GgufBuilder g;
  g.string("general.architecture", "llama").u32("general.alignment", 32);
  g.tensor("q4_k", {2, 256}, fuzz_readers::Type::Q4_K, q4_k)
      .tensor("q6_k", {1, 256}, fuzz_readers::Type::Q6_K, q6_k)
      .tensor("q5_0", {32}, fuzz_readers::Type::Q5_0, q5_0)
      .tensor("q5_1", {32}, fuzz_readers::Type::Q5_1, q5_1)
      .tensor("q8_0", {2, 32}, fuzz_readers::Type::Q8_0, test::q8_0_block(0.125F, q) + test::q8_0_block(-0.5F, q))
      .tensor("q4_1", {32}, fuzz_readers::Type::Q4_1, test::q4_1_block(0.5F, -2.0F, codes));
  const std::string good = g.bytes();

  auto read = [](const fuzz_readers::Path& path) {
    fuzz_readers::read_gguf(path);
    const weights::Gguf file(path);
    for (const auto& t : file.tensors()) {
      const at::Tensor values = file.dequantize(t.name, at::kBFloat16);
      REQUIRE(values.scalar_type() == at::kBFloat16);
    }
  };
  const auto outcome = test::fuzz::run(good, test::fuzz::through_file(scratch.path / "fuzz.gguf", read),
                                       {.header = fuzz_readers::gguf_data_start(scratch.path / "good.gguf", good)});
  CHECK(outcome.refused > 0);
  CHECK(outcome.read > 0);
}

TEST_CASE("load_safetensors: fuzz: mutated and truncated files give tensors or an ftopt::Error", "[fuzz][weights]") {
  const test::ScratchDir scratch("fuzz-safetensors");
  // huggingface/safetensors' format: an 8-byte little-endian header length N, N bytes of JSON
  // (padded with spaces to a multiple of 8), then the data, offsets counted from its start.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("steps":{"dtype":"I64","shape":[2],"data_offsets":[24,40]},)"
      R"("half":{"dtype":"BF16","shape":[4],"data_offsets":[40,48]},)"
      R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[48,51]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string good(8, '\0');
  const std::uint64_t length = header.size();
  std::memcpy(good.data(), &length, 8);
  good += header;
  const float weight[6] = {1.5F, -2.0F, 0.25F, 3.0F, -0.5F, 8.0F};
  const std::int64_t steps[2] = {7, -1};
  const std::uint16_t half[4] = {0x3F80, 0xC000, 0x3F00, 0x4040};  // bfloat16 1, -2, 0.5, 3
  const unsigned char mask[3] = {1, 0, 1};
  good.append(reinterpret_cast<const char*>(weight), sizeof weight);
  good.append(reinterpret_cast<const char*>(steps), sizeof steps);
  good.append(reinterpret_cast<const char*>(half), sizeof half);
  good.append(reinterpret_cast<const char*>(mask), sizeof mask);

  auto read = [](const fuzz_readers::Path& path) {
    for (const auto& item : weights::load_safetensors(path)) REQUIRE(item.value().defined());
  };
  const auto outcome = test::fuzz::run(good, test::fuzz::through_file(scratch.path / "fuzz.safetensors", read),
                                       {.header = fuzz_readers::safetensors_data_start(good),
                                        .alphabet = fuzz_readers::json_alphabet});
  CHECK(outcome.refused > 0);
  CHECK(outcome.read > 0);  // mutations in the data read as other values
}

TEST_CASE("load_torch_file: fuzz: mutated torch.save files (tests/fixtures) give tensors or an ftopt::Error",
          "[fuzz][weights]") {
  const test::ScratchDir scratch("fuzz-torch-file");
  // Real torch.save zip archives (PyTorch 1.13, tests/fixtures/make_fixtures.py): an OrderedDict
  // and a dict of tensors of several dtypes, views of one storage and a transposed one.
  for (const char* name : {"state_dict_ordereddict.pt", "state_dict_dict.pt"}) {
    INFO(name);
    const std::string good = fuzz_readers::bytes_of(test::fixture(name));
    // The archive's first record is data.pkl, the pickle; the name of the second ends its bytes.
    const auto pickle_end = good.find("/data/0");
    REQUIRE(pickle_end != std::string::npos);
    auto read = [](const fuzz_readers::Path& path) {
      for (const auto& item : weights::load_torch_file(path)) REQUIRE(item.value().contiguous().defined());
    };
    const auto outcome =
        test::fuzz::run(good, test::fuzz::through_file(scratch.path / name, read), {.header = pickle_end});
    CHECK(outcome.refused > 0);
    CHECK(outcome.read > 0);  // mutations in a storage's bytes, a key's text or the zip's unchecked fields
  }
}

TEST_CASE("read_idx: fuzz: mutated plain and gzipped IDX files give a tensor or an ftopt::Error", "[fuzz][data][idx]") {
  const test::ScratchDir scratch("fuzz-idx");
  // uint8 [2, 3, 4] plain, and float32 [3, 2] gzipped (tests/data/idx_files.hpp).
  auto images = test::idx_files::header(0x08, {2, 3, 4});
  for (int v = 0; v < 24; ++v) images.push_back(static_cast<unsigned char>(v * 10));
  auto values = test::idx_files::header(0x0D, {3, 2});
  for (const float v : {1.5F, -0.25F, 3.0F, 0.0F, -8.0F, 1e-3F})
    test::idx_files::put_be32(values, std::bit_cast<std::uint32_t>(v));
  test::idx_files::write_bytes(scratch.path / "good.idx.gz", values, /*gzip=*/true);
  const std::string plain(images.begin(), images.end());
  const std::string gzipped = fuzz_readers::bytes_of(scratch.path / "good.idx.gz");

  auto read = [](const fuzz_readers::Path& path) {
    const at::Tensor t = data::read_idx(path);
    REQUIRE(t.dim() >= 1);
    (void)t.sum();
  };
  // The header: the magic and one 4-byte size per dimension (gzip's own: 10 bytes).
  const auto from_plain =
      test::fuzz::run(plain, test::fuzz::through_file(scratch.path / "fuzz.idx", read), {.header = 4 + 4 * 3});
  CHECK(from_plain.refused > 0);
  CHECK(from_plain.read > 0);
  const auto from_gzip =
      test::fuzz::run(gzipped, test::fuzz::through_file(scratch.path / "fuzz.idx.gz", read), {.header = 16});
  CHECK(from_gzip.refused > 0);
  CHECK(from_gzip.read > 0);  // mutations in gzip's time stamp and OS bytes, which zlib does not check
}

TEST_CASE("decode_jpeg_bytes: fuzz: mutated JPEGs decode or are an ftopt::Error", "[fuzz][pipeline][jpeg]") {
  // A smooth RGB image, 16 x 24, encoded by TurboJPEG (baseline, 4:2:0).
  const auto image = (torch::arange(3).view({3, 1, 1}) * 50 + torch::arange(16).view({1, 16, 1}) * 4 +
                      torch::arange(24).view({1, 1, 24}) * 3)
                         .to(torch::kByte);
  const auto encoded = pipeline::encode_jpeg(image, 90);
  const std::string good(encoded.begin(), encoded.end());
  // The segments before the scan (SOS, FF DA): quantization and Huffman tables, the frame's size.
  const auto scan = good.find("\xFF\xDA");
  REQUIRE(scan != std::string::npos);

  auto read = [](const std::string& bytes) {
    const std::vector<unsigned char> data(bytes.begin(), bytes.end());
    // Each decode outside REQUIRE, which would take its ftopt::Error for a failure.
    const auto rgb = pipeline::decode_jpeg_bytes(data, "fuzz.jpg", {.channels = 3});
    const auto gray = pipeline::decode_jpeg_bytes(data, "fuzz.jpg", {.channels = 1, .min_size = 8});
    REQUIRE(rgb.size(0) == 3);
    REQUIRE(gray.size(0) == 1);
  };
  const auto outcome = test::fuzz::run(good, read, {.header = scan});
  CHECK(outcome.refused > 0);
  // Nothing mutated need decode: with TJFLAG_STOPONWARNING, TurboJPEG refuses nearly every edit of
  // the tables or the scan; what is asserted is that none escapes as anything but ftopt::Error,
  // and that the thread decodes a good file after them all (a bad stream once left TurboJPEG's
  // handle failing every later decode).
  CHECK_NOTHROW(read(good));
  const auto again = pipeline::decode_jpeg_bytes({encoded.begin(), encoded.end()}, "good.jpg");
  CHECK(again.sizes() == image.sizes());
}

TEST_CASE("SentencePieceBpe: fuzz: random bytes give ids that decode back, or an ftopt::Error", "[fuzz][text]") {
  // Gemma's shape in small: control, user-defined and byte tokens, "▁" pieces, merges by position.
  const std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "\n\n", "  ",
                                           "ab", "\u2581a", "a", "b", "\u2581", "abc", "bc", "\n", "\u00e9"};
  std::vector<std::int64_t> types = {3, 3, 3, 2, 3, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  std::vector<std::string> all = tokens;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    all.emplace_back(name);
    types.push_back(6);
  }
  const text::SentencePieceBpe sp({.tokens = all, .scores = std::vector<double>(all.size(), 0.0), .types = types,
                                   .order = text::MergeOrder::Position, .bos = 2, .eos = 1, .pad = 0, .unk = 3,
                                   .add_bos = true},
                                  "fuzz vocabulary");
  std::mt19937_64 rng(Catch::rngSeed());
  const std::string alphabet = "ab c\n\n<start_of_turn>\xC3\xA9\xE2\x96\x81\xF0\x9F\x98\x80\x80\xBF\xFF" + std::string(1, '\0');
  for (int round = 0, rounds = 10 * test::fuzz::mutations(); round < rounds; ++round) {
    std::string bytes(rng() % 60, ' ');
    for (auto& b : bytes) b = (rng() % 4 == 0) ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    try {
      const auto ids = sp.encode(bytes, "fuzz");
      REQUIRE(!ids.empty());
      REQUIRE(ids.front() == 2);
      for (const auto id : ids) REQUIRE((id >= 0 && id < sp.size()));
      // Every byte has a token, so decode gives the text back, but for a "▁" in it, which reads as a
      // space (as transformers' decoder does).
      std::string expected;
      for (std::size_t i = 0; i < bytes.size(); ++i) {
        const bool bar = std::string_view(bytes).substr(i).starts_with("\u2581");
        expected += bar ? ' ' : bytes[i];
        if (bar) i += 2;
      }
      REQUIRE(sp.decode(std::span<const std::int64_t>(ids).subspan(1)) == expected);
    } catch (const ftopt::Error& e) {
      REQUIRE(std::string(e.what()).find("not UTF-8 at byte") != std::string::npos);
    }
  }
}

TEST_CASE("BertTokenizer: fuzz: random bytes and mutated tokenizer.json give ids or an ftopt::Error", "[fuzz][text]") {
  const auto& vocabulary = fuzz_readers::bert_vocabulary();
  const text::BertTokenizer tok{text::WordPiece(vocabulary)};
  std::mt19937_64 rng(Catch::rngSeed());
  const std::string alphabet = "aAbB ,!\t\n[]SEPCLS\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\x80\xBF\xFF" + std::string(1, '\0');
  for (int round = 0, rounds = 10 * test::fuzz::mutations(); round < rounds; ++round) {
    std::string bytes(rng() % 40, ' ');
    for (auto& b : bytes) b = (rng() % 4 == 0) ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    try {
      const auto ids = tok.encode(bytes);
      REQUIRE(ids.size() >= 2);
      for (const auto id : ids) REQUIRE((id >= 0 && id < tok.vocab_size()));
    } catch (const ftopt::Error& e) {
      REQUIRE(std::string(e.what()).find("not UTF-8 at byte") != std::string::npos);
    }
  }

  const test::ScratchDir dir("fuzz-bert-tokenizer-json");
  nlohmann::json vocab = nlohmann::json::object();
  for (std::size_t i = 0; i < vocabulary.size(); ++i) vocab[vocabulary[i]] = i;
  const std::string good =
      nlohmann::json{{"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                                     {"strip_accents", nullptr}, {"lowercase", true}}},
                     {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
                     {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                                {"max_input_chars_per_word", 100}, {"vocab", vocab}}}}
          .dump();
  const auto outcome = test::fuzz::run(
      good, test::fuzz::through_file(dir.path / "tokenizer.json", [](const fuzz_readers::Path& path) {
        fuzz_readers::encode_with_bert(text::BertTokenizer::from_tokenizer_json(path));
      }),
      {.header = good.size(), .alphabet = fuzz_readers::json_alphabet});
  CHECK(outcome.refused > 0);
  CHECK(outcome.read > 0);  // some mutations land in a token's text and keep the file valid
}

TEST_CASE("BertTokenizer: fuzz: mutated vocab.txt and tokenizer_config.json give ids or an ftopt::Error",
          "[fuzz][text]") {
  const test::ScratchDir dir("fuzz-bert-vocab");
  std::string vocab_txt;
  for (const auto& token : fuzz_readers::bert_vocabulary()) vocab_txt += token + "\n";
  const auto from_vocab = test::fuzz::run(
      vocab_txt, test::fuzz::through_file(dir.path / "vocab.txt", [](const fuzz_readers::Path& path) {
        fuzz_readers::encode_with_bert(text::BertTokenizer::from_vocab_file(path));
      }),
      {.header = vocab_txt.size(), .alphabet = "\n\r #[]\xC3"});
  CHECK(from_vocab.refused > 0);
  CHECK(from_vocab.read > 0);

  // tokenizer_config.json beside a good vocab.txt, read by from_pretrained (no tokenizer.json).
  fuzz_readers::write(dir.path / "vocab.txt", vocab_txt);
  const std::string config = R"({"do_lower_case": false, "tokenize_chinese_chars": true, "strip_accents": null})";
  const auto from_config = test::fuzz::run(
      config, test::fuzz::through_file(dir.path / "tokenizer_config.json", [](const fuzz_readers::Path& path) {
        fuzz_readers::encode_with_bert(text::BertTokenizer::from_pretrained(path.parent_path()));
      }),
      {.header = config.size(), .alphabet = fuzz_readers::json_alphabet});
  CHECK(from_config.refused > 0);
  CHECK(from_config.read > 0);
}

TEST_CASE("ByteLevelBpe: fuzz: mutated tokenizer.json and tokenizer_config.json give a tokenizer or an ftopt::Error, "
          "random bytes encode",
          "[fuzz][text][bpe]") {
  const test::ScratchDir dir("fuzz-bpe-json");
  const auto tokens = fuzz_readers::bpe_tokens();
  // tokenizers' layout: added tokens and the pre-tokenizer first, then the model with its merges
  // and, last and longest, its vocabulary (the byte stand-ins and the merged tokens).
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (std::size_t i = 2; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  const nlohmann::ordered_json file = {
      {"added_tokens", {{{"id", 0}, {"content", "<|endoftext|>"}, {"special", true}},
                        {{"id", 1}, {"content", "<|im_start|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Sequence"},
                         {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}},
                                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
      {"model", {{"type", "BPE"}, {"ignore_merges", false},
                 {"merges", {nlohmann::ordered_json::array({"\u0120", "a"}), "\u0120a b"}}, {"vocab", vocab}}}};
  const std::string good = file.dump();
  auto read = [](const fuzz_readers::Path& path) { fuzz_readers::encode_with_bpe(text::bpe_from_tokenizer_json(path)); };
  const auto from_json = test::fuzz::run(good, test::fuzz::through_file(dir.path / "tokenizer.json", read),
                                         {.header = good.find("\"vocab\""), .alphabet = fuzz_readers::json_alphabet});
  CHECK(from_json.refused > 0);
  CHECK(from_json.read > 0);  // mutations in an added token's text, or in a field the reader defaults

  // tokenizer_config.json beside a good tokenizer.json: the special tokens, by name or as objects.
  fuzz_readers::write(dir.path / "tokenizer.json", good);
  const std::string config =
      R"({"bos_token": "<|im_start|>", "eos_token": {"content": "<|endoftext|>", "lstrip": false}, "pad_token": null})";
  const auto from_config =
      test::fuzz::run(config, test::fuzz::through_file(dir.path / "tokenizer_config.json", [&](const fuzz_readers::Path&) {
                        read(dir.path / "tokenizer.json");
                      }),
                      {.header = config.size(), .alphabet = fuzz_readers::json_alphabet});
  CHECK(from_config.refused > 0);
  CHECK(from_config.read > 0);

  // Any bytes encode to ids of the vocabulary, or are an error naming the byte that is not UTF-8.
  fuzz_readers::write(dir.path / "tokenizer_config.json", config);
  const auto bpe = text::bpe_from_tokenizer_json(dir.path / "tokenizer.json");
  const std::vector<std::string> pieces = {"a", "b", "ab", " ", "1", "2", "\n", "\t", "<|im_start|>", "<|endoftext|>",
                                           "<|", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\x80", "\xFF"};
  std::mt19937_64 rng(Catch::rngSeed());
  for (int round = 0, rounds = 10 * test::fuzz::mutations(); round < rounds; ++round) {
    std::string text;
    for (std::size_t n = rng() % 24; n > 0; --n)
      text += rng() % 4 == 0 ? std::string(1, static_cast<char>(rng())) : pieces[rng() % pieces.size()];
    try {
      for (const auto id : bpe.encode(text)) REQUIRE((id >= 0 && id < bpe.size()));
    } catch (const ftopt::Error& e) {
      REQUIRE(std::string(e.what()).find("not UTF-8 at byte") != std::string::npos);
    }
  }
}

TEST_CASE("ByteLevelBpe: fuzz: a mutated GGUF tokenizer gives a tokenizer or an ftopt::Error", "[fuzz][text][bpe][gguf]") {
  const test::ScratchDir scratch("fuzz-bpe-gguf");
  // llama.cpp's keys (bpe_files.hpp), the token list last: every count and short string first.
  const auto tokens = fuzz_readers::bpe_tokens();
  std::vector<std::int32_t> types(tokens.size(), 1);
  types[0] = types[1] = 3;  // control: added tokens
  test::GgufBuilder g;
  g.string("tokenizer.ggml.model", "gpt2")
      .string("tokenizer.ggml.pre", "smollm")
      .strings("tokenizer.ggml.merges", fuzz_readers::bpe_merges)
      .i32s("tokenizer.ggml.token_type", types)
      .u32("tokenizer.ggml.bos_token_id", 1)
      .u32("tokenizer.ggml.eos_token_id", 0)
      .strings("tokenizer.ggml.tokens", tokens);
  const std::string good = g.bytes();
  const auto tokens_at = good.find("tokenizer.ggml.tokens");
  REQUIRE(tokens_at != std::string::npos);
  const auto outcome = test::fuzz::run(
      good, test::fuzz::through_file(scratch.path / "fuzz.gguf", [](const fuzz_readers::Path& path) {
        fuzz_readers::encode_with_bpe(text::bpe_from_gguf(weights::Gguf(path)));
      }),
      {.header = tokens_at + 64});
  CHECK(outcome.refused > 0);
  CHECK(outcome.read > 0);
}

TEST_CASE("load_csv and load_jsonl: fuzz: mutated files give a TextSet or an ftopt::Error", "[fuzz][data]") {
  const test::ScratchDir dir("fuzz-text-set");
  const std::string csv = "text,label\n\"a, \"\"b\"\"\",pos\nplain,neg\n\"multi\nline\",pos\n";
  const std::string jsonl = "{\"text\": \"caf\xC3\xA9\", \"label\": \"a\"}\n{\"text\": \"x\", \"label\": \"b\"}\n";
  auto valid = [](const data::TextSet& set) {
    REQUIRE(set.texts.size() == set.labels.size());
    for (const auto label : set.labels) REQUIRE((label >= 0 && label < static_cast<std::int64_t>(set.classes.size())));
  };
  const std::string alphabet = "\",\n\r{}\\\xC3";
  auto read_csv = [&](const fuzz_readers::Path& path) { valid(data::load_csv(path)); };
  auto read_jsonl = [&](const fuzz_readers::Path& path) { valid(data::load_jsonl(path)); };
  const auto from_csv = test::fuzz::run(csv, test::fuzz::through_file(dir.path / "f.csv", read_csv),
                                        {.header = csv.size(), .alphabet = alphabet});
  CHECK(from_csv.refused > 0);
  CHECK(from_csv.read > 0);
  const auto from_jsonl = test::fuzz::run(jsonl, test::fuzz::through_file(dir.path / "f.jsonl", read_jsonl),
                                          {.header = jsonl.size(), .alphabet = alphabet});
  CHECK(from_jsonl.refused > 0);
  CHECK(from_jsonl.read > 0);
}

TEST_CASE("PEFT adapter files: fuzz: mutated adapter_config.json and adapter_model.safetensors load or are an "
          "ftopt::Error",
          "[fuzz][peft][lora]") {
  const test::ScratchDir dir("fuzz-peft-adapter");
  // A LoRA adapter of a small Mlp (both Linears targeted), with random A and B, as PEFT writes it.
  const peft::LoraOptions settings{.r = 2, .alpha = 4, .dropout = 0.1, .targets = {"layers.0", "layers.2"}};
  {
    auto model = test::small_mlp(21);
    peft::Lora lora(settings);
    lora.attach(*model);
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters())
      if (p.requires_grad()) p.normal_();
    peft::save_adapter(*model, lora, dir.path);
  }
  const std::string config = fuzz_readers::bytes_of(dir.path / "adapter_config.json");
  const std::string tensors = fuzz_readers::bytes_of(dir.path / "adapter_model.safetensors");
  // What a user does: read the config, attach its Lora to the base model, load the tensors.
  auto load = [&dir](const fuzz_readers::Path&) {
    const peft::LoraOptions options = peft::lora_config(dir.path);
    auto model = test::small_mlp(21);
    peft::Lora lora(options);
    lora.attach(*model);
    const auto report = peft::load_adapter(*model, dir.path);
    REQUIRE(report.loaded >= 1);
  };
  const auto from_config = test::fuzz::run(config, test::fuzz::through_file(dir.path / "adapter_config.json", load),
                                           {.header = config.size(), .alphabet = fuzz_readers::json_alphabet});
  CHECK(from_config.refused > 0);
  CHECK(from_config.read > 0);  // mutations in a value that stays valid (lora_dropout) or a field ftopt ignores

  fuzz_readers::write(dir.path / "adapter_config.json", config);
  const auto from_tensors =
      test::fuzz::run(tensors, test::fuzz::through_file(dir.path / "adapter_model.safetensors", load),
                      {.header = fuzz_readers::safetensors_data_start(tensors), .alphabet = fuzz_readers::json_alphabet});
  CHECK(from_tensors.refused > 0);
  CHECK(from_tensors.read > 0);
}
