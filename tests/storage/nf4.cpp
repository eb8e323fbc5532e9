// Tests for include/ftopt/storage/nf4.hpp: the NF4 format against its definition written out
// element by element (bitsandbytes' create_normal_map for the levels, torchao's to_nf4 for the
// blocks and the double quantization: formats_by_definition.hpp), its size, and its errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include <torch/torch.h>

#include <ftopt/storage/int8_per_channel.hpp>
#include <ftopt/storage/nf4.hpp>

#include "../support.hpp"
#include "formats_by_definition.hpp"

using namespace ftopt;
using ftopt::test::nf4_by_definition;
using ftopt::test::values_of;

TEST_CASE("The NF4 levels are bitsandbytes' normal quantiles with offset 0.9677083", "[storage][nf4]") {
  // create_normal_map: norm.ppf over linspace(offset, 0.5, 9)[:-1] (8 positive levels) and the
  // negated ppf over linspace(offset, 0.5, 8)[:-1] (7 negative), 0 between, divided by the largest.
  const double offset = 0.9677083;
  const auto ppf = [](double p) { return std::sqrt(2.0) * at::erfinv(at::tensor(2 * p - 1, at::kDouble)).item<double>(); };
  const auto linspace = [&](int n) { return torch::linspace(offset, 0.5, n, at::kFloat); };
  std::vector<double> v;
  const auto pos = linspace(9), neg = linspace(8);
  for (int i = 0; i < 8; ++i) v.push_back(ppf(pos[i].item<double>()));
  for (int i = 0; i < 7; ++i) v.push_back(-ppf(neg[i].item<double>()));
  v.push_back(0);
  std::sort(v.begin(), v.end());
  for (int k = 0; k < 16; ++k) {
    INFO("level " << k);
    CHECK(storage::Nf4::levels[k] == Approx(v[k] / v.back()).margin(1e-6));
  }
}

TEST_CASE("NF4 codes, packing and dequantized values follow torchao's to_nf4", "[storage][nf4]") {
  torch::manual_seed(3);
  const auto weight = torch::randn({64, 128}) * torch::rand({64, 1});  // rows of different scales
  const storage::Nf4 nf4{.block_size = 64, .scaler_block_size = 16};
  const auto packed = nf4.quantize(weight);
  const auto [codes, expected] = nf4_by_definition(values_of(weight), 64, 16);

  REQUIRE(packed.data.scalar_type() == at::kByte);
  REQUIRE(packed.data.numel() == weight.numel() / 2);
  CHECK(packed.scales.scalar_type() == at::kChar);
  CHECK(packed.scales.numel() == weight.numel() / 64);
  CHECK(packed.factors.numel() == weight.numel() / 64 / 16);
  // Two codes a byte, the first in the high nibble.
  const auto bytes = packed.data.contiguous();
  std::size_t wrong = 0;
  for (std::int64_t i = 0; i < bytes.numel(); ++i) {
    const int byte = bytes[i].item<int>();
    wrong += (byte >> 4) != codes[2 * i] || (byte & 15) != codes[2 * i + 1];
  }
  CHECK(wrong == 0);
  const auto got = values_of(storage::Nf4::dequantize(packed, at::kFloat));
  REQUIRE(got.size() == expected.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - expected[i]));
  CHECK(worst < 1e-5);  // the mean of the absmaxes may sum in another order
  // bf16 (the CPU's one-pass path) and fp16 (ATen ops, the path off the CPU): the float values, rounded.
  CHECK(torch::equal(storage::Nf4::dequantize(packed, at::kHalf), storage::Nf4::dequantize(packed, at::kFloat).to(at::kHalf)));
  CHECK(torch::equal(storage::Nf4::dequantize(packed, at::kBFloat16), storage::Nf4::dequantize(packed, at::kFloat).to(at::kBFloat16)));
  // An all-zero block codes the zero level and dequantizes to zero.
  auto zeros = weight.clone();
  zeros.view(-1).narrow(0, 0, 64).zero_();
  CHECK(storage::Nf4::dequantize(nf4.quantize(zeros), at::kFloat).view(-1).narrow(0, 0, 64).abs().max().item<float>() == 0);
}

TEST_CASE("The formats' sizes: int8 <= 30% and NF4 <= 16% of float32", "[storage][nf4][int8]") {
  const auto weight = torch::randn({256, 1024});
  const double fp32 = 4.0 * static_cast<double>(weight.numel());
  const auto int8 = storage::Int8PerChannel{}.quantize(weight);
  const auto nf4 = storage::Nf4{}.quantize(weight);
  // numel int8 values + a float scale per row; numel / 2 bytes of codes, an int8 scaler per 64
  // values, a float factor per 256 scalers, a float mean.
  CHECK(int8.bytes() == weight.numel() + 4 * 256);
  CHECK(nf4.bytes() == weight.numel() / 2 + weight.numel() / 64 + 4 * (weight.numel() / 64 / 256) + 4);
  CHECK(int8.bytes() / fp32 <= 0.30);
  CHECK(nf4.bytes() / fp32 <= 0.16);
}

TEST_CASE("An NF4 block size that does not divide the weight is an error naming it and the module", "[storage][nf4]") {
  const auto weight = torch::randn({16, 16});
  CHECK_THAT(test::message_of([&] { storage::Nf4{.block_size = 48}.check(weight, "encoder.query"); }),
             Catch::Contains("block_size = 48 does not divide the 256 values of 'encoder.query'"));
  CHECK_THAT(test::message_of([&] { storage::Nf4{.block_size = 64, .scaler_block_size = 3}.check(weight, "encoder.key"); }),
             Catch::Contains("scaler_block_size = 3 does not divide the 4 blocks of 'encoder.key'"));
  CHECK_THAT(test::message_of([] { storage::Nf4{.block_size = 7}.validate(); }),
             Catch::Contains("block_size must be a positive even number, got 7"));
  CHECK(test::message_of([&] { storage::Nf4{.block_size = 64, .scaler_block_size = 4}.check(weight, "ok"); }) ==
        "(no ftopt::Error thrown)");
}
