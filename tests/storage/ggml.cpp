// Tests for include/ftopt/storage/ggml.hpp: ggml's block layouts (ggml-common.h's static_asserts
// give each block's bytes), their values by the formulas of ggml-quants.c's dequantize_row_*
// (Q4_K's and Q6_K's blocks packed here value by value as its quantize_row_*_ref packs them),
// and rows that stand alone. gguf-py's dequantize on random K-quant blocks: tests/peer/llama.py.
#include <catch2/catch.hpp>

#include <array>

#include <torch/torch.h>

#include <ftopt/storage/ggml.hpp>

#include "../support.hpp"
#include "../weights/gguf_builder.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using storage::ggml::Type;
using test::half_bytes;

namespace {
/// A byte string as the uint8 tensor dequantize reads.
at::Tensor bytes_of(const std::string& s) {
  return at::from_blob(const_cast<char*>(s.data()), {static_cast<std::int64_t>(s.size())}, at::kByte).clone();
}
} // namespace

TEST_CASE("ggml: block layouts are ggml-common.h's", "[storage][gguf]") {
  struct Row {
    Type type;
    std::int64_t values, bytes;
  };
  // sizeof(ggml_half) = 2; QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 = 32; QK_K = 256; K_SCALE_SIZE = 12.
  for (const auto& [type, values, bytes] : {Row{Type::F32, 1, 4}, Row{Type::F16, 1, 2}, Row{Type::BF16, 1, 2},
                                            Row{Type::Q4_0, 32, 2 + 16}, Row{Type::Q4_1, 32, 2 * 2 + 16},
                                            Row{Type::Q5_0, 32, 2 + 4 + 16}, Row{Type::Q5_1, 32, 2 * 2 + 4 + 16},
                                            Row{Type::Q8_0, 32, 2 + 32}, Row{Type::Q4_K, 256, 2 * 2 + 12 + 128},
                                            Row{Type::Q6_K, 256, 128 + 64 + 16 + 2}}) {
    const auto layout = storage::ggml::layout(static_cast<std::uint32_t>(type));
    REQUIRE(layout.has_value());
    CHECK(layout->block_values == values);
    CHECK(layout->block_bytes == bytes);
  }
  CHECK_FALSE(storage::ggml::layout(4).has_value());  // Q4_2, removed from ggml
  CHECK_FALSE(storage::ggml::layout(99).has_value());
}

TEST_CASE("ggml: Q4_1 rows dequantize on their own, in any order, to any float type", "[storage][gguf]") {
  std::vector<int> a(32), b(32);
  for (int j = 0; j < 32; ++j) a[j] = j % 16, b[j] = 15 - j % 16;
  const std::string row0 = test::q4_1_block(0.5F, -4.0F, a) + test::q4_1_block(1.0F, 0.0F, b);
  const std::string row1 = test::q4_1_block(2.0F, 1.5F, b) + test::q4_1_block(0.125F, -1.0F, a);
  const at::Tensor w = storage::ggml::dequantize(bytes_of(row0 + row1), Type::Q4_1, {2, 64}, at::kFloat);
  // dequantize_row_q4_1: y = x * d + m, byte j's low nibble is value j, its high nibble value j + 16.
  for (int j = 0; j < 32; ++j) {
    CHECK(w[0][j].item<float>() == 0.5F * static_cast<float>(a[j]) - 4.0F);
    CHECK(w[0][32 + j].item<float>() == static_cast<float>(b[j]));
    CHECK(w[1][j].item<float>() == 2.0F * static_cast<float>(b[j]) + 1.5F);
    CHECK(w[1][32 + j].item<float>() == 0.125F * static_cast<float>(a[j]) - 1.0F);
  }
  const at::Tensor swapped = storage::ggml::dequantize(bytes_of(row1 + row0), Type::Q4_1, {2, 64}, at::kFloat);
  CHECK(torch::equal(swapped, w.flip(0)));
  const at::Tensor bf16 = storage::ggml::dequantize(bytes_of(row0 + row1), Type::Q4_1, {2, 64}, at::kBFloat16);
  CHECK(bf16.scalar_type() == at::kBFloat16);
  CHECK(torch::equal(bf16, w.to(at::kBFloat16)));
}

TEST_CASE("ggml: a type ftopt does not read, or bytes that do not fit the shape, are errors", "[storage][gguf]") {
  const at::Tensor bytes = at::zeros({144}, at::kByte);
  CHECK_THAT(test::message_of([&] { storage::ggml::dequantize(at::zeros({176}, at::kByte), Type::Q5_K, {256}, at::kFloat); }),
             Contains("type Q5_K is not one ftopt reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K)"));
  CHECK_THAT(test::message_of([&] { storage::ggml::dequantize(bytes, Type::Q4_1, {64}, at::kFloat); }),
             Contains("144 bytes do not hold 64 values of type Q4_1"));
}


TEST_CASE("ggml: Q5_0 and Q5_1 take each value's fifth bit from the block's 32-bit word", "[storage][gguf]") {
  // quantize_row_q5_0_ref's packing (test::q5_bits): value j < 16 in byte j's low nibble, value
  // j + 16 in its high one; value v's fifth bit is bit v of the little-endian word before them.
  std::vector<int> q(32);
  for (int v = 0; v < 32; ++v) q[v] = (11 * v + 5) % 32;  // both halves of the range: every fifth bit set somewhere
  const at::Tensor q5_0 = storage::ggml::dequantize(bytes_of(test::q5_0_block(0.5F, q) + test::q5_0_block(-2.0F, q)),
                                                    Type::Q5_0, {2, 32}, at::kFloat);
  const at::Tensor q5_1 = storage::ggml::dequantize(bytes_of(test::q5_1_block(0.25F, -3.0F, q)), Type::Q5_1, {32},
                                                    at::kFloat);
  for (int v = 0; v < 32; ++v) {
    CHECK(q5_0[0][v].item<float>() == 0.5F * static_cast<float>(q[v] - 16));   // dequantize_row_q5_0
    CHECK(q5_0[1][v].item<float>() == -2.0F * static_cast<float>(q[v] - 16));
    CHECK(q5_1[v].item<float>() == 0.25F * static_cast<float>(q[v]) - 3.0F);  // dequantize_row_q5_1
  }
}

TEST_CASE("ggml: Q4_K's 6-bit scales and mins, and its nibbles, give d sc q - dmin m", "[storage][gguf]") {
  const float d = 0.5F, dmin = 0.25F;
  std::array<int, 8> sc{}, mn{};
  for (int j = 0; j < 8; ++j) sc[j] = 7 * j + 10, mn[j] = 63 - 5 * j;  // above 15: the high bits matter
  std::array<std::uint8_t, 12> scales{};
  for (int j = 0; j < 8; ++j) {  // quantize_row_q4_K_ref's packing
    if (j < 4) {
      scales[j] = static_cast<std::uint8_t>(sc[j]);
      scales[j + 4] = static_cast<std::uint8_t>(mn[j]);
    } else {
      scales[j + 4] = static_cast<std::uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<std::uint8_t>((sc[j] >> 4) << 6);
      scales[j] |= static_cast<std::uint8_t>((mn[j] >> 4) << 6);
    }
  }
  std::array<int, 256> q{};
  std::array<std::uint8_t, 128> qs{};
  for (int v = 0; v < 256; ++v) {
    q[v] = (7 * v + 3) % 16;
    const int group = v / 64, l = v % 64;  // 64 values per 32 bytes: low nibbles, then high
    qs[group * 32 + l % 32] |= static_cast<std::uint8_t>(l < 32 ? q[v] : q[v] << 4);
  }
  const std::string block = half_bytes(d) + half_bytes(dmin) + std::string(scales.begin(), scales.end()) +
                            std::string(qs.begin(), qs.end());
  REQUIRE(block.size() == 144);
  const at::Tensor w = storage::ggml::dequantize(bytes_of(block + block), Type::Q4_K, {2, 256}, at::kFloat);
  for (int v = 0; v < 256; ++v) {
    const int sub = v / 32;  // 8 sub-blocks of 32 values
    const float want = d * static_cast<float>(sc[sub]) * static_cast<float>(q[v]) - dmin * static_cast<float>(mn[sub]);
    CHECK(w[0][v].item<float>() == want);
    CHECK(w[1][v].item<float>() == want);
  }
}

TEST_CASE("ggml: Q6_K's low nibbles, high pairs and int8 scales give d sc (q - 32)", "[storage][gguf]") {
  const float d = 0.25F;
  std::array<int, 256> q{};
  std::array<std::uint8_t, 128> ql{};
  std::array<std::uint8_t, 64> qh{};
  std::array<std::int8_t, 16> sc{};
  for (int i = 0; i < 16; ++i) sc[i] = static_cast<std::int8_t>(9 * i - 70);
  for (int v = 0; v < 256; ++v) {  // quantize_row_q6_K_ref's packing
    q[v] = (5 * v + 1) % 64;
    const int half = v / 128, quarter = (v % 128) / 32, l = v % 32;
    std::uint8_t& low = ql[half * 64 + l + (quarter % 2) * 32];
    low |= static_cast<std::uint8_t>(quarter < 2 ? (q[v] & 0xF) : (q[v] & 0xF) << 4);
    qh[half * 32 + l] |= static_cast<std::uint8_t>((q[v] >> 4) << (2 * quarter));
  }
  std::string block(ql.begin(), ql.end());
  block += std::string(qh.begin(), qh.end());
  block += std::string(reinterpret_cast<const char*>(sc.data()), 16);
  block += half_bytes(d);
  REQUIRE(block.size() == 210);
  const at::Tensor w = storage::ggml::dequantize(bytes_of(block), Type::Q6_K, {256}, at::kFloat);
  for (int v = 0; v < 256; ++v) {
    const int scale = sc[v / 16];  // 16 sub-blocks of 16 values
    CHECK(w[v].item<float>() == d * static_cast<float>(scale) * static_cast<float>(q[v] - 32));
  }
}
