// Tests for include/ftopt/quant/support/frozen_weight.hpp: the int8 per-row and NF4 formats
// against their definitions written out here element by element (bitsandbytes' create_normal_map
// for the NF4 levels, torchao's to_nf4 for the blocks and the double quantization), and the
// frozen Linear's forward and gradients against at::linear over the dequantized weight.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/quant/support/frozen_weight.hpp>

#include "../support.hpp"
#include "formats_by_definition.hpp"

using namespace ftopt;
using ftopt::test::nf4_by_definition;
using ftopt::test::values_of;

namespace {


/// y against its expected value, then both backward from one random output gradient: the
/// gradients of `inputs` (y's side) against those of `expected_inputs`, relative tolerance `rtol`.
void check_against(const torch::Tensor& y, const torch::Tensor& expected, const std::vector<torch::Tensor>& inputs,
                   const std::vector<torch::Tensor>& expected_inputs, double rtol = 1e-5) {
  CHECK(torch::allclose(y, expected, 1e-5, 1e-5));
  const auto g = torch::randn_like(expected);
  (y * g).sum().backward();
  (expected * g).sum().backward();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient " << i);
    CHECK(torch::allclose(inputs[i].grad(), expected_inputs[i].grad(), rtol, 1e-5));
  }
}

} // namespace

TEST_CASE("The NF4 levels are bitsandbytes' normal quantiles with offset 0.9677083", "[quant][nf4]") {
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
    CHECK(quant::Nf4::levels[k] == Approx(v[k] / v.back()).margin(1e-6));
  }
}

TEST_CASE("NF4 codes, packing and dequantized values follow torchao's to_nf4", "[quant][nf4]") {
  torch::manual_seed(3);
  const auto weight = torch::randn({64, 128}) * torch::rand({64, 1});  // rows of different scales
  const quant::Nf4 nf4{.block_size = 64, .scaler_block_size = 16};
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
  const auto got = values_of(quant::Nf4::dequantize(packed, at::kFloat));
  REQUIRE(got.size() == expected.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - expected[i]));
  CHECK(worst < 1e-5);  // the mean of the absmaxes may sum in another order
  // bf16 (the CPU's one-pass path) and fp16 (ATen ops, the path off the CPU): the float values, rounded.
  CHECK(torch::equal(quant::Nf4::dequantize(packed, at::kHalf), quant::Nf4::dequantize(packed, at::kFloat).to(at::kHalf)));
  CHECK(torch::equal(quant::Nf4::dequantize(packed, at::kBFloat16), quant::Nf4::dequantize(packed, at::kFloat).to(at::kBFloat16)));
  // An all-zero block codes the zero level and dequantizes to zero.
  auto zeros = weight.clone();
  zeros.view(-1).narrow(0, 0, 64).zero_();
  CHECK(quant::Nf4::dequantize(nf4.quantize(zeros), at::kFloat).view(-1).narrow(0, 0, 64).abs().max().item<float>() == 0);
}

TEST_CASE("Int8 per channel: scale max(absmax / 127.5, eps) per row, q = clamp(round(w / scale))", "[quant][int8]") {
  torch::manual_seed(4);
  auto weight = torch::randn({24, 40});
  weight[5].zero_();  // a zero row takes the smallest scale
  const auto packed = quant::Int8PerChannel{}.quantize(weight);
  REQUIRE(packed.data.scalar_type() == at::kChar);
  REQUIRE(packed.scales.numel() == 24);
  const auto q = values_of(packed.data), s = values_of(packed.scales);
  const auto [codes, scales] = ftopt::test::int8_per_row_by_definition(values_of(weight), 24, 40);
  std::size_t wrong = 0;
  for (int r = 0; r < 24; ++r) wrong += s[r] != scales[r];
  for (std::size_t i = 0; i < q.size(); ++i) wrong += q[i] != codes[i];
  CHECK(wrong == 0);
  const auto back = quant::Int8PerChannel::dequantize(packed, at::kFloat);
  CHECK(torch::allclose(back, packed.data.to(at::kFloat) * packed.scales.unsqueeze(1)));
  // Every value within half a step of its row's scale (and float32's rounding of w / scale).
  CHECK(((back - weight).abs() <= packed.scales.unsqueeze(1) * (0.5 + 1e-5)).all().item<bool>());
}

TEST_CASE("The formats' sizes: int8 <= 30% and NF4 <= 16% of float32", "[quant][nf4][int8]") {
  const auto weight = torch::randn({256, 1024});
  const double fp32 = 4.0 * static_cast<double>(weight.numel());
  const auto int8 = quant::Int8PerChannel{}.quantize(weight);
  const auto nf4 = quant::Nf4{}.quantize(weight);
  // numel int8 values + a float scale per row; numel / 2 bytes of codes, an int8 scaler per 64
  // values, a float factor per 256 scalers, a float mean.
  CHECK(int8.bytes() == weight.numel() + 4 * 256);
  CHECK(nf4.bytes() == weight.numel() / 2 + weight.numel() / 64 + 4 * (weight.numel() / 64 / 256) + 4);
  CHECK(int8.bytes() / fp32 <= 0.30);
  CHECK(nf4.bytes() / fp32 <= 0.16);
}

TEST_CASE("An NF4 block size that does not divide the weight is an error naming it and the module", "[quant][nf4]") {
  const auto weight = torch::randn({16, 16});
  CHECK_THAT(test::message_of([&] { quant::Nf4{.block_size = 48}.check(weight, "encoder.query"); }),
             Catch::Contains("block_size = 48 does not divide the 256 values of 'encoder.query'"));
  CHECK_THAT(test::message_of([&] { quant::Nf4{.block_size = 64, .scaler_block_size = 3}.check(weight, "encoder.key"); }),
             Catch::Contains("scaler_block_size = 3 does not divide the 4 blocks of 'encoder.key'"));
  CHECK_THAT(test::message_of([] { quant::Nf4{.block_size = 7}.validate(); }),
             Catch::Contains("block_size must be a positive even number, got 7"));
  CHECK(test::message_of([&] { quant::Nf4{.block_size = 64, .scaler_block_size = 4}.check(weight, "ok"); }) ==
        "(no ftopt::Error thrown)");
}

TEMPLATE_TEST_CASE("frozen_linear computes x (deq(W) [+ s B A])^T + b and dequantizes again for the input's gradient",
                   "[quant][nf4][int8]", quant::Int8PerChannel, quant::Nf4) {
  torch::manual_seed(5);
  const auto format = test::small_format<TestType>();
  const auto packed = format.quantize(torch::randn({32, 64}));
  const auto w = TestType::dequantize(packed, at::kFloat);
  auto bias = torch::randn({32}).requires_grad_();
  auto x = torch::randn({3, 5, 64}).requires_grad_();
  const auto y = quant::frozen_linear<TestType>(x, packed, bias);
  auto x2 = x.detach().clone().requires_grad_();
  auto bias2 = bias.detach().clone().requires_grad_();
  const auto expected = torch::linear(x2, w, bias2);
  check_against(y, expected, {x, bias}, {x2, bias2});
  // A Linear without bias.
  CHECK(torch::allclose(quant::frozen_linear<TestType>(x.detach(), packed, at::Tensor()), torch::linear(x.detach(), w),
                        1e-5, 1e-5));

  // In bf16 (the input as autocast casts it): the product in bf16, the bias gradient in float.
  auto xb = x.detach().to(at::kBFloat16).requires_grad_();
  const auto yb = quant::frozen_linear<TestType>(xb, packed, bias);
  CHECK(yb.scalar_type() == at::kBFloat16);
  CHECK(torch::allclose(yb.to(at::kFloat), torch::linear(x.detach(), w, bias.detach()), 5e-2, 5e-2));
  bias.mutable_grad().reset();
  yb.sum().backward();
  CHECK(xb.grad().scalar_type() == at::kBFloat16);
  CHECK(bias.grad().scalar_type() == at::kFloat);

  // With a low-rank term: x (deq(W) + s B A)^T + b, and the gradients of A, B, x and b.
  auto a = (torch::randn({4, 64}) * 0.1).requires_grad_();
  auto b = (torch::randn({32, 4}) * 0.1).requires_grad_();
  auto a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  for (auto* t : {&x, &bias, &x2, &bias2})
    if (t->grad().defined()) t->mutable_grad().reset();
  const auto z = quant::frozen_linear<TestType>(x, packed, bias, {a, b, 0.5});
  const auto z2 = torch::linear(x2, w, bias2) + 0.5 * torch::matmul(torch::matmul(x2, a2.t()), b2.t());
  check_against(z, z2, {x, bias, a, b}, {x2, bias2, a2, b2}, 1e-4);  // A's and B's: longer sums
}

TEMPLATE_TEST_CASE("frozen_linears computes packed layers on one input side by side, each with its term or none",
                   "[quant][nf4][int8]", quant::Int8PerChannel, quant::Nf4) {
  // Three layers of widths 32, 16, 32 on one input: the first and last with low-rank terms of
  // ranks 4 and 2, the middle one without (a merged branch). Expected: each layer's formula
  // x (deq(W_i) + s_i B_i A_i)^T + b_i written out on float tensors, concatenated.
  torch::manual_seed(6);
  const auto format = test::small_format<TestType>();
  const std::vector<std::int64_t> widths{32, 16, 32};
  std::vector<quant::PackedWeight> packed;
  std::vector<torch::Tensor> w;
  for (auto out : widths) {
    packed.push_back(format.quantize(torch::randn({out, 64})));
    w.push_back(TestType::dequantize(packed.back(), at::kFloat));
  }
  const std::array<double, 2> s{0.5, 2.0};
  const auto small = [](std::int64_t rows, std::int64_t cols) { return (torch::randn({rows, cols}) * 0.1).requires_grad_(); };
  std::array<torch::Tensor, 2> a{small(4, 64), small(2, 64)};
  std::array<torch::Tensor, 2> b{small(32, 4), small(32, 2)};
  auto bias = torch::randn({80}).requires_grad_();
  auto x = torch::randn({3, 5, 64}).requires_grad_();
  const std::vector<std::optional<nn::LowRankTerm>> terms{nn::LowRankTerm{a[0], b[0], s[0]}, std::nullopt,
                                                          nn::LowRankTerm{a[1], b[1], s[1]}};
  const auto y = quant::frozen_linears<TestType>(x, packed, bias, terms);

  auto x2 = x.detach().clone().requires_grad_(), bias2 = bias.detach().clone().requires_grad_();
  std::array<torch::Tensor, 2> a2{a[0].detach().clone().requires_grad_(), a[1].detach().clone().requires_grad_()};
  std::array<torch::Tensor, 2> b2{b[0].detach().clone().requires_grad_(), b[1].detach().clone().requires_grad_()};
  const auto biases = bias2.split_with_sizes(widths);
  const auto expected = torch::cat(
      {torch::linear(x2, w[0], biases[0]) + s[0] * torch::matmul(torch::matmul(x2, a2[0].t()), b2[0].t()),
       torch::linear(x2, w[1], biases[1]),
       torch::linear(x2, w[2], biases[2]) + s[1] * torch::matmul(torch::matmul(x2, a2[1].t()), b2[1].t())},
      -1);
  REQUIRE(y.sizes() == expected.sizes());
  check_against(y, expected, {x, bias, a[0], a[1], b[0], b[1]}, {x2, bias2, a2[0], a2[1], b2[0], b2[1]}, 1e-4);
}
