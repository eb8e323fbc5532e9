// Tests for include/ftopt/detail/compat.hpp: autocast scoping and attention, on whichever
// LibTorch this build uses.
#include <catch2/catch.hpp>

#include <cmath>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>

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
  CHECK(torch::allclose(compat::scaled_dot_product_attention(q, k, v),
                        attention_by_hand(q, k, v, [](auto, auto) { return true; })));

  auto some = [](std::int64_t i, std::int64_t j) { return (i + j) % 2 == 0 || j == 0; };
  auto mask = torch::zeros({4, 5}, torch::kBool);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) mask[i][j] = some(i, j);
  CHECK(torch::allclose(compat::scaled_dot_product_attention(q, k, v, mask), attention_by_hand(q, k, v, some)));

  auto ks = k.narrow(0, 0, 4), vs = v.narrow(0, 0, 4);
  CHECK(torch::allclose(compat::scaled_dot_product_attention(q, ks, vs, std::nullopt, 0.0, /*is_causal=*/true),
                        attention_by_hand(q, ks, vs, [](auto i, auto j) { return j <= i; })));
}
