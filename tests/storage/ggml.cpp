// Tests for include/ftopt/storage/ggml.hpp: ggml's block layouts (ggml-common.h's static_asserts
// give each block's bytes), their values by the formulas of ggml-quants.c's dequantize_row_*,
// and rows that stand alone.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/storage/ggml.hpp>

#include "../support.hpp"
#include "../weights/gguf_builder.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using storage::ggml::Type;

TEST_CASE("ggml: block layouts are ggml-common.h's", "[storage][gguf]") {
  struct Row {
    Type type;
    std::int64_t values, bytes;
  };
  // sizeof(ggml_half) = 2; QK4_0 = QK4_1 = QK8_0 = 32; QK_K = 256; K_SCALE_SIZE = 12.
  for (const auto& [type, values, bytes] : {Row{Type::F32, 1, 4}, Row{Type::F16, 1, 2}, Row{Type::BF16, 1, 2},
                                            Row{Type::Q4_0, 32, 2 + 16}, Row{Type::Q4_1, 32, 2 * 2 + 16},
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
  auto tensor_of = [](const std::string& bytes) {
    return at::from_blob(const_cast<char*>(bytes.data()), {static_cast<std::int64_t>(bytes.size())}, at::kByte).clone();
  };
  const at::Tensor w = storage::ggml::dequantize(tensor_of(row0 + row1), Type::Q4_1, {2, 64}, at::kFloat);
  // dequantize_row_q4_1: y = x * d + m, byte j's low nibble is value j, its high nibble value j + 16.
  for (int j = 0; j < 32; ++j) {
    CHECK(w[0][j].item<float>() == 0.5F * static_cast<float>(a[j]) - 4.0F);
    CHECK(w[0][32 + j].item<float>() == static_cast<float>(b[j]));
    CHECK(w[1][j].item<float>() == 2.0F * static_cast<float>(b[j]) + 1.5F);
    CHECK(w[1][32 + j].item<float>() == 0.125F * static_cast<float>(a[j]) - 1.0F);
  }
  const at::Tensor swapped = storage::ggml::dequantize(tensor_of(row1 + row0), Type::Q4_1, {2, 64}, at::kFloat);
  CHECK(torch::equal(swapped, w.flip(0)));
  const at::Tensor bf16 = storage::ggml::dequantize(tensor_of(row0 + row1), Type::Q4_1, {2, 64}, at::kBFloat16);
  CHECK(bf16.scalar_type() == at::kBFloat16);
  CHECK(torch::equal(bf16, w.to(at::kBFloat16)));
}

TEST_CASE("ggml: a type ftopt does not read, or bytes that do not fit the shape, are errors", "[storage][gguf]") {
  const at::Tensor bytes = at::zeros({144}, at::kByte);
  CHECK_THAT(test::message_of([&] { storage::ggml::dequantize(bytes, Type::Q4_K, {256}, at::kFloat); }),
             Contains("type Q4_K is not one ftopt reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1)"));
  CHECK_THAT(test::message_of([&] { storage::ggml::dequantize(bytes, Type::Q4_1, {64}, at::kFloat); }),
             Contains("144 bytes do not hold 64 values of type Q4_1"));
}
