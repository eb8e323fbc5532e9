// Tests for include/ftopt/peft/kernel/adapter_linears.hpp over packed frozen bases (int8 per
// channel and NF4): the forward and every gradient against at::linear over the dequantized
// weight plus the low-rank term, written out here, alone and for several layers on one input.
// The same kernel over float bases: adapted.cpp (LoRA, DoRA), ../ia3.cpp and ../vera.cpp.
#include <catch2/catch.hpp>

#include <array>
#include <vector>

#include <torch/torch.h>

#include <ftopt/peft/kernel/adapter_linears.hpp>
#include <ftopt/storage/int8_per_channel.hpp>
#include <ftopt/storage/nf4.hpp>

#include "../../support.hpp"
#include "../../storage/formats_by_definition.hpp"

using namespace ftopt;

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

/// One packed layer through the kernel, with a term or none.
template <class Format>
torch::Tensor packed_linear(const torch::Tensor& x, const storage::PackedWeight& packed, const torch::Tensor& bias,
                            peft::kernel::Term term = {}) {
  const std::vector<peft::kernel::Layer> layer{{peft::kernel::FrozenBase::packed<Format>(packed), std::move(term)}};
  return peft::kernel::adapter_linears(layer, bias, x);
}

} // namespace

TEMPLATE_TEST_CASE("The adapter kernel over a packed base computes x (deq(W) [+ s B A])^T + b and dequantizes again for the input's gradient",
                   "[peft][kernel][nf4][int8]", storage::Int8PerChannel, storage::Nf4) {
  torch::manual_seed(5);
  const auto format = test::small_format<TestType>();
  const auto packed = format.quantize(torch::randn({32, 64}));
  const auto w = TestType::dequantize(packed, at::kFloat);
  auto bias = torch::randn({32}).requires_grad_();
  auto x = torch::randn({3, 5, 64}).requires_grad_();
  const auto y = packed_linear<TestType>(x, packed, bias);
  auto x2 = x.detach().clone().requires_grad_();
  auto bias2 = bias.detach().clone().requires_grad_();
  const auto expected = torch::linear(x2, w, bias2);
  check_against(y, expected, {x, bias}, {x2, bias2});
  // A Linear without bias.
  CHECK(torch::allclose(packed_linear<TestType>(x.detach(), packed, at::Tensor()), torch::linear(x.detach(), w),
                        1e-5, 1e-5));

  // In bf16 (the input as autocast casts it): the product in bf16, the bias gradient in float.
  auto xb = x.detach().to(at::kBFloat16).requires_grad_();
  const auto yb = packed_linear<TestType>(xb, packed, bias);
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
  const auto z = packed_linear<TestType>(x, packed, bias, peft::kernel::LowRank{a, b, 0.5});
  const auto z2 = torch::linear(x2, w, bias2) + 0.5 * torch::matmul(torch::matmul(x2, a2.t()), b2.t());
  check_against(z, z2, {x, bias, a, b}, {x2, bias2, a2, b2}, 1e-4);  // A's and B's: longer sums
}

TEMPLATE_TEST_CASE("The adapter kernel computes packed layers on one input side by side, each with its term or none",
                   "[peft][kernel][nf4][int8]", storage::Int8PerChannel, storage::Nf4) {
  // Three layers of widths 32, 16, 32 on one input: the first and last with low-rank terms of
  // ranks 4 and 2, the middle one without (a merged branch). Expected: each layer's formula
  // x (deq(W_i) + s_i B_i A_i)^T + b_i written out on float tensors, concatenated.
  torch::manual_seed(6);
  const auto format = test::small_format<TestType>();
  const std::vector<std::int64_t> widths{32, 16, 32};
  std::vector<storage::PackedWeight> packed;
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
  const std::vector<peft::kernel::Layer> layers{
      {peft::kernel::FrozenBase::packed<TestType>(packed[0]), peft::kernel::LowRank{a[0], b[0], s[0]}},
      {peft::kernel::FrozenBase::packed<TestType>(packed[1]), {}},
      {peft::kernel::FrozenBase::packed<TestType>(packed[2]), peft::kernel::LowRank{a[1], b[1], s[1]}}};
  const auto y = peft::kernel::adapter_linears(layers, bias, x);

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
