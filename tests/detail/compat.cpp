// Tests for include/ftopt/detail/compat.hpp: autocast scoping and attention, on whichever
// LibTorch this build uses.
#include <catch2/catch.hpp>

#include <cmath>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/nn/attention.hpp>

using ftopt::compat::AutocastScope;

TEST_CASE("AutocastScope behaves like torch.autocast on the CPU", "[compat][autocast]") {
  torch::nn::Linear linear(8, 4);
  auto x = torch::randn({2, 8});
  REQUIRE_FALSE(ftopt::compat::autocast_enabled(torch::kCPU));
  {
    AutocastScope outer(torch::kCPU, torch::kBFloat16);
    CHECK(linear(x).scalar_type() == torch::kBFloat16);  // linear is on autocast's lower-precision list
    {
      AutocastScope inner(torch::kCPU, torch::kBFloat16, /*enabled=*/false);
      CHECK(linear(x).scalar_type() == torch::kFloat);
    }
    CHECK(ftopt::compat::autocast_enabled(torch::kCPU));  // the outer state is back
    auto y = linear(x);
    y.sum().backward();
    CHECK(linear->weight.grad().scalar_type() == torch::kFloat);  // fp32 master gradients
  }
  CHECK_FALSE(ftopt::compat::autocast_enabled(torch::kCPU));
  CHECK(linear(x).scalar_type() == torch::kFloat);
}

namespace {
/// softmax(q k^T / sqrt(d)) v written element by element, over the allowed (i, j) pairs only.
template <class Allowed>
torch::Tensor attention_by_hand(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                Allowed allowed) {
  const auto L = q.size(0), S = k.size(0), d = q.size(1);
  auto out = torch::zeros({L, v.size(1)}, torch::kDouble);
  for (std::int64_t i = 0; i < L; ++i) {
    std::vector<double> w(static_cast<std::size_t>(S), 0.0);
    double total = 0;
    for (std::int64_t j = 0; j < S; ++j) {
      if (!allowed(i, j)) continue;
      double s = 0;
      for (std::int64_t c = 0; c < d; ++c) s += q[i][c].item<double>() * k[j][c].item<double>();
      w[j] = std::exp(s / std::sqrt(static_cast<double>(d)));
      total += w[j];
    }
    for (std::int64_t j = 0; j < S; ++j) out[i] += (w[j] / total) * v[j];
  }
  return out;
}
} // namespace

TEST_CASE("scaled_dot_product_attention is softmax(q k^T / sqrt(d) + mask) v", "[compat][attention]") {
  torch::manual_seed(5);
  auto q = torch::randn({4, 3}, torch::kDouble), k = torch::randn({5, 3}, torch::kDouble),
       v = torch::randn({5, 2}, torch::kDouble);
  // Qualified calls: at::scaled_dot_product_attention is found by argument-dependent lookup too.
  namespace compat = ftopt::compat;
  CHECK(torch::allclose(nn::scaled_dot_product_attention(q, k, v),
                        attention_by_hand(q, k, v, [](auto, auto) { return true; })));

  auto some = [](std::int64_t i, std::int64_t j) { return (i + j) % 2 == 0 || j == 0; };
  auto mask = torch::zeros({4, 5}, torch::kBool);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) mask[i][j] = some(i, j);
  CHECK(torch::allclose(nn::scaled_dot_product_attention(q, k, v, mask), attention_by_hand(q, k, v, some)));

  auto ks = k.narrow(0, 0, 4), vs = v.narrow(0, 0, 4);
  CHECK(torch::allclose(nn::scaled_dot_product_attention(q, ks, vs, std::nullopt, 0.0, /*is_causal=*/true),
                        attention_by_hand(q, ks, vs, [](auto i, auto j) { return j <= i; })));
}

// 1.13 has no fused kernel to compare with (it always writes attention out, which the test above
// checks against attention computed by hand).
#if FTOPT_TORCH_AT_LEAST(2, 0)
namespace {
/// Output and input gradients of attention under one kernel, for the same inputs and output gradient.
std::vector<torch::Tensor> attention_with(ftopt::AttentionKernel kernel, const std::vector<torch::Tensor>& qkv,
                                          const torch::Tensor& grad, const std::optional<torch::Tensor>& mask,
                                          bool causal) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : qkv) leaves.push_back(t.detach().clone().requires_grad_(true));
  auto out = ftopt::nn::scaled_dot_product_attention(leaves[0], leaves[1], leaves[2], mask, 0.0, causal,
                                                         {.attention = kernel});
  out.backward(grad);
  return {out.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
}
} // namespace

TEST_CASE("the written-out attention matches ATen's fused kernel, values and gradients", "[compat][attention]") {
  using ftopt::AttentionKernel;
  torch::manual_seed(11);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const double tol = dtype == torch::kFloat ? 1e-5 : 3e-2;
    for (bool causal : {false, true}) {
      for (bool masked : {false, true}) {
        CAPTURE(dtype, causal, masked);
        std::vector<torch::Tensor> qkv = {torch::randn({3, 2, 7, 16}), torch::randn({3, 2, 7, 16}),
                                          torch::randn({3, 2, 7, 16})};
        for (auto& t : qkv) t = t.to(dtype);
        auto grad = torch::randn({3, 2, 7, 16}).to(dtype);
        std::optional<torch::Tensor> mask;
        if (masked && !causal) mask = torch::rand({7, 7}) > 0.3 | torch::eye(7, torch::kBool);
        auto fused = attention_with(AttentionKernel::Fused, qkv, grad, mask, causal);
        auto written = attention_with(AttentionKernel::WrittenOut, qkv, grad, mask, causal);
        for (std::size_t i = 0; i < fused.size(); ++i) {
          CAPTURE(i);
          CHECK(torch::allclose(written[i].to(torch::kFloat), fused[i].to(torch::kFloat), tol, tol));
        }
      }
    }
  }
}
#endif

TEST_CASE("Auto writes attention out for short CPU sequences, as measured, and fuses long ones",
          "[compat][attention]") {
  using ftopt::nn::attention_written_out_pays;
  auto shaped = [](std::int64_t len, torch::Dtype dtype) { return torch::zeros({1, 1, len, 8}, dtype); };
  CHECK(attention_written_out_pays(shaped(50, torch::kFloat), shaped(50, torch::kFloat)));
  CHECK(attention_written_out_pays(shaped(197, torch::kFloat), shaped(197, torch::kFloat)));
  CHECK_FALSE(attention_written_out_pays(shaped(256, torch::kFloat), shaped(256, torch::kFloat)));
  CHECK(attention_written_out_pays(shaped(1024, torch::kBFloat16), shaped(1024, torch::kBFloat16)));
  CHECK_FALSE(attention_written_out_pays(shaped(2048, torch::kBFloat16), shaped(2048, torch::kBFloat16)));
}
