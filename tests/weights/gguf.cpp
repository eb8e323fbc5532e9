// Tests for include/ftopt/weights/gguf.hpp: files written byte by byte from llama.cpp's
// docs/gguf.md read back (metadata of every type, tensors of every readable type, shapes,
// alignment), and broken ones are errors that name the file and the value (mutated and cut
// short files: tests/fuzz/readers.cpp). The real SmolLM2 file is read against gguf-py and
// transformers in tests/peer/llama.py.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/weights/gguf.hpp>

#include "../support.hpp"
#include "gguf_builder.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using storage::ggml::Type;

namespace {
std::vector<int> sample_codes() {
  std::vector<int> codes(32);
  for (int j = 0; j < 32; ++j) codes[j] = (j * 7) % 16;
  return codes;
}
} // namespace

TEST_CASE("GGUF: metadata of every type and tensors of every readable type read back", "[weights][gguf]") {
  const test::ScratchDir scratch("gguf");
  const auto path = scratch.path / "sample.gguf";
  test::sample_gguf().write(path);
  const weights::Gguf file(path);
  CHECK(file.version() == 3);
  CHECK(file.string("general.architecture") == "llama");
  CHECK(file.integer("llama.block_count") == 2);
  CHECK(file.real("llama.rope.freq_base") == 10000.0);
  CHECK_FALSE(file.boolean("tokenizer.ggml.add_bos_token"));
  CHECK(file.integer("neg") == -5);
  CHECK(file.integer("big") == (std::int64_t{1} << 40));
  CHECK(file.real("wide") == 0.125);
  CHECK(file.strings("tokenizer.ggml.tokens") == std::vector<std::string>{"a", "b", "\xC3\xA9"});
  CHECK(file.integers("tokenizer.ggml.token_type") == std::vector<std::int64_t>{1, 3, -1});
  CHECK_FALSE(file.has("missing"));
  CHECK_THAT(test::message_of([&] { file.integer("general.architecture"); }),
             Contains("sample.gguf: metadata 'general.architecture' is not an integer"));
  CHECK_THAT(test::message_of([&] { file.string("missing"); }), Contains("sample.gguf: no metadata 'missing'"));
  CHECK_THAT(test::message_of([&] { file.strings("llama.block_count"); }),
             Contains("metadata 'llama.block_count' is a value, not an array"));

  REQUIRE(file.tensors().size() == 6);
  CHECK(file.tensor("q4_1").shape == std::vector<std::int64_t>{2, 32});  // ggml lists 32 first
  CHECK(file.tensor("q4_1").bytes == 40);
  for (const auto& t : file.tensors()) CHECK(t.offset % 32 == 0);
  const at::Tensor f = at::arange(8, at::kFloat).view({2, 4}) - 3;
  CHECK(torch::equal(file.dequantize("f32"), f));
  CHECK(torch::equal(file.dequantize("f16"), f));
  CHECK(torch::equal(file.dequantize("bf16"), f));
  CHECK(file.dequantize("f32", at::kBFloat16).scalar_type() == at::kBFloat16);

  // ggml-common.h: Q4_1 w = d q + m, Q4_0 w = d (q - 8), Q8_0 w = d q.
  const auto codes = sample_codes();
  const at::Tensor q4_1 = file.dequantize("q4_1"), q4_0 = file.dequantize("q4_0"), q8_0 = file.dequantize("q8_0");
  for (int j = 0; j < 32; ++j) {
    CHECK(q4_1[0][j].item<float>() == 0.5F * static_cast<float>(codes[j]) - 2.0F);
    CHECK(q4_1[1][j].item<float>() == 0.25F * static_cast<float>(codes[j]) + 1.0F);
    CHECK(q4_0[0][j].item<float>() == 0.5F * static_cast<float>(codes[j] - 8));
    CHECK(q8_0[j].item<float>() == 0.125F * static_cast<float>(j * 8 - 128));
  }
  CHECK_THAT(test::message_of([&] { file.tensor("nope"); }), Contains("sample.gguf: no tensor 'nope'"));
}

TEST_CASE("GGUF: a tensor's bytes are a view of the mapped file that outlives the reader", "[weights][gguf]") {
  const test::ScratchDir scratch("gguf-view");
  const auto path = scratch.path / "sample.gguf";
  auto g = test::sample_gguf();
  g.alignment = 64;
  g.u32("general.alignment", 64);
  g.write(path);
  at::Tensor bytes, again;
  {
    const weights::Gguf file(path);
    const auto& t = file.tensor("q4_1");
    CHECK(t.offset % 64 == 0);
    bytes = file.bytes(t);
    again = file.bytes(t);
    CHECK(bytes.data_ptr() == again.data_ptr());  // no copy
  }
  const auto codes = sample_codes();
  CHECK(torch::equal(storage::ggml::dequantize(bytes, Type::Q4_1, {2, 32}, at::kFloat).select(0, 0),
                     at::tensor(std::vector<float>(codes.begin(), codes.end())) * 0.5 - 2.0));
}

TEST_CASE("GGUF: a broken file is an error naming the file and the value", "[weights][gguf]") {
  const test::ScratchDir scratch("gguf-bad");
  const auto path = scratch.path / "bad.gguf";
  auto message = [&](const std::string& bytes) {
    test::GgufBuilder::write_bytes(path, bytes);
    return test::message_of([&] {
      const weights::Gguf file(path);
      for (const auto& t : file.tensors()) file.dequantize(t.name);
    });
  };
  auto g = test::sample_gguf();
  g.magic = 0x46554746U;
  CHECK_THAT(message(g.bytes()), Contains("bad.gguf: wrong magic 0x46554746"));
  g = test::sample_gguf();
  g.version = 1;
  CHECK_THAT(message(g.bytes()), Contains("bad.gguf: GGUF version 1 is not one ftopt reads (2 or 3)"));
  g.version = 4;
  CHECK_THAT(message(g.bytes()), Contains("GGUF version 4"));
  g.version = 0x03000000U;
  CHECK_THAT(message(g.bytes()), Contains("a big-endian GGUF file"));

  const std::string good = test::sample_gguf().bytes();
  CHECK_THAT(message(good.substr(0, 50)), Contains("bad.gguf: the header's metadata count counts 9 items at byte 24, "
                                                   "more than the 26 bytes left can hold"));
  CHECK_THAT(message(good.substr(0, 200)), Contains("bad.gguf: truncated: "));
  CHECK_THAT(message(good.substr(0, good.size() - 40)), Contains("bad.gguf: truncated: tensor 'q8_0' needs 34 bytes at data offset"));
  CHECK_THAT(message(""), Contains("truncated: the magic at byte 0 needs 4 bytes, the file has 0 left"));
  std::string counts = good;  // a tensor count no file of this size can hold
  const std::uint64_t many = 1ULL << 40;
  std::memcpy(counts.data() + 8, &many, 8);
  CHECK_THAT(message(counts), Contains("the header's tensor count counts 1099511627776 items"));

  g = test::sample_gguf();
  g.tensor("k_quant", {1, 256}, Type::Q5_K, std::string(176, '\0'));
  CHECK_THAT(message(g.bytes()), Contains("bad.gguf: tensor 'k_quant': storage::ggml::dequantize: type Q5_K is not one "
                                          "ftopt reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K)"));
  g = test::sample_gguf();
  g.tensor("odd", {4}, 99U, std::string(16, '\0'));
  CHECK_THAT(message(g.bytes()), Contains("tensor 'odd' has ggml type 99, not one ggml defines"));
  g = test::sample_gguf();
  g.tensor("ragged", {2, 16}, Type::Q4_1, std::string(20, '\0'));
  CHECK_THAT(message(g.bytes()), Contains("tensor 'ragged' has rows of 16 values, not whole Q4_1 blocks of 32"));
  g = test::sample_gguf();
  g.string("general.architecture", "twice");
  CHECK_THAT(message(g.bytes()), Contains("metadata key 'general.architecture' appears twice"));
  g = test::sample_gguf();
  g.scalar("flag", weights::GgufType::Bool, std::uint8_t{7});
  CHECK_THAT(message(g.bytes()), Contains("metadata 'flag' holds the bool byte 7, not 0 or 1"));
  g = test::sample_gguf();
  g.scalar("what", static_cast<weights::GgufType>(13), std::uint32_t{0});
  CHECK_THAT(message(g.bytes()), Contains("metadata 'what' has value type 13, not a GGUF type (0 to 12)"));
  CHECK_THAT(test::message_of([&] { weights::Gguf(scratch.path / "absent.gguf"); }),
             Contains("absent.gguf: cannot open"));
}
