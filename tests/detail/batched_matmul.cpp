// Tests for include/ftopt/detail/batched_matmul.hpp: the small-matrix kernel against at::matmul
// in float64 (PyTorch's own product, computed without float32 rounding), values and gradients.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include <ftopt/detail/batched_matmul.hpp>
#include <ftopt/detail/compat.hpp>
#include <ftopt/nn/attention.hpp>

#include "../support.hpp"

using ftopt::detail::batched_matmul;
using ftopt::detail::batched_matmul_applies;

namespace {
/// |x - reference| <= 1e-5 (1 + |reference|) elementwise: float32 sums of up to 128 products.
/// True where the AVX2/FMA kernel is compiled in and the CPU runs it; else marks the running test
/// skipped (without the kernel, batched_matmul is at::matmul and a comparison with it proves nothing).
bool kernel_or_skip() {
  if (ftopt::detail::batched_matmul_kernel_available()) return true;
  ftopt::test::skip("this CPU or compiler has no AVX2/FMA kernel: batched_matmul is at::matmul here");
  return false;
}

bool matches_float64(const torch::Tensor& x, const torch::Tensor& reference) {
  return x.sizes() == reference.sizes() &&
         ((x.to(torch::kDouble) - reference).abs() <= 1e-5 * (1 + reference.abs())).all().item<bool>();
}
} // namespace

TEST_CASE("batched_matmul takes small float32 CPU products and leaves the rest to at::matmul",
          "[detail][batched_matmul]") {
  const bool kernel = ftopt::detail::batched_matmul_kernel_available();
  if (!kernel) WARN("this CPU or compiler has no AVX2/FMA kernel: batched_matmul is at::matmul here");
  auto a = torch::randn({8, 50, 16}), b = torch::randn({8, 16, 50});
  CHECK(batched_matmul_applies(a, b) == kernel);                                   // the main job's ViT scores
  CHECK(batched_matmul_applies(a.view({2, 4, 50, 16}), b.view({2, 4, 16, 50})) == kernel);
  CHECK_FALSE(batched_matmul_applies(a.to(torch::kDouble), b.to(torch::kDouble)));  // float32 only
  CHECK_FALSE(batched_matmul_applies(a.to(torch::kBFloat16), b.to(torch::kBFloat16)));
  CHECK_FALSE(batched_matmul_applies(a, b.narrow(0, 0, 1)));                       // broadcast batch
  CHECK_FALSE(batched_matmul_applies(a[0], b[0]));                                 // a plain matrix product
  CHECK_FALSE(batched_matmul_applies(torch::randn({2, 129, 4}), torch::randn({2, 4, 4})));  // a size > 128
  CHECK_FALSE(batched_matmul_applies(torch::randn({2, 64, 32}), torch::randn({2, 32, 64})));  // m k n > 2^16
  // What it does not take, or is told not to, still gives at::matmul's product.
  auto ad = a.to(torch::kDouble), bd = b.to(torch::kDouble);
  CHECK(torch::equal(batched_matmul(ad, bd), at::matmul(ad, bd)));
  CHECK(torch::equal(batched_matmul(a, b, /*use_kernel=*/false), at::matmul(a, b)));
}

TEST_CASE("batched_matmul's products and gradients are at::matmul's", "[detail][batched_matmul]") {
  if (!kernel_or_skip()) return;
  torch::manual_seed(11);
  // Row counts odd and even (the kernel takes rows in pairs), column counts on both sides of the
  // 8-float vectors and of the 32-column blocks, inner sizes from 1 up.
  const std::vector<std::array<std::int64_t, 4>> shapes{{3, 1, 1, 1},   {5, 2, 3, 7},    {4, 3, 16, 8},
                                                        {2, 7, 9, 9},   {6, 50, 16, 50}, {6, 50, 50, 16},
                                                        {2, 16, 50, 50}, {3, 33, 5, 33}, {2, 1, 100, 65},
                                                        {2, 40, 40, 40}};
  for (const auto& [g, m, k, n] : shapes) {
    INFO("items " << g << ", [" << m << ", " << k << "] x [" << k << ", " << n << "]");
    auto a = torch::randn({g, m, k}, torch::requires_grad()), b = torch::randn({g, k, n}, torch::requires_grad());
    auto ad = a.detach().to(torch::kDouble).requires_grad_(), bd = b.detach().to(torch::kDouble).requires_grad_();
    auto c = batched_matmul(a, b), cd = at::matmul(ad, bd);
    CHECK(matches_float64(c, cd));
    auto upstream = torch::randn({g, m, n});
    auto grads = torch::autograd::grad({c}, {a, b}, {upstream});
    auto grads_d = torch::autograd::grad({cd}, {ad, bd}, {upstream.to(torch::kDouble)});
    CHECK(matches_float64(grads[0], grads_d[0]));  // dA = dC B^T
    CHECK(matches_float64(grads[1], grads_d[1]));  // dB = A^T dC
  }
}

TEST_CASE("batched_matmul takes strided operands, batch dims and threads as at::matmul does",
          "[detail][batched_matmul]") {
  if (!kernel_or_skip()) return;
  torch::manual_seed(12);
  // Attention's shapes: q [batch, heads, L, d] times k^T, a transposed view; then a 2-thread run.
  auto q = torch::randn({3, 4, 10, 8}).permute({0, 2, 1, 3}).contiguous().permute({0, 2, 1, 3});
  auto k = torch::randn({3, 4, 10, 8});
  REQUIRE_FALSE(q.is_contiguous());
  const auto reference = at::matmul(q.to(torch::kDouble), k.to(torch::kDouble).transpose(-2, -1));
  CHECK(matches_float64(batched_matmul(q, k.transpose(-2, -1)), reference));
  auto shared = torch::randn({1, 6, 5}).expand({4, 6, 5});  // one matrix for every item: stride 0
  auto each = torch::randn({4, 5, 3});
  CHECK(matches_float64(batched_matmul(shared, each), at::matmul(shared.to(torch::kDouble), each.to(torch::kDouble))));
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  auto many = torch::randn({600, 20, 6}), other = torch::randn({600, 6, 20});
  const auto product = batched_matmul(many, other);
  at::set_num_threads(threads);
  CHECK(matches_float64(product, at::matmul(many.to(torch::kDouble), other.to(torch::kDouble))));
}

TEST_CASE("batched_matmul has at::matmul's second derivatives", "[detail][batched_matmul]") {
  if (!kernel_or_skip()) return;
  torch::manual_seed(13);
  auto a = torch::randn({2, 5, 3}, torch::requires_grad()), b = torch::randn({2, 3, 4}, torch::requires_grad());
  auto ad = a.detach().to(torch::kDouble).requires_grad_(), bd = b.detach().to(torch::kDouble).requires_grad_();
  // d/dA of sum((dL/dB)^2), where L = sum(sin(A B)): a path through the backward's own products.
  auto second = [](const torch::Tensor& c, const torch::Tensor& x, const torch::Tensor& y) {
    auto dy = torch::autograd::grad({c.sin().sum()}, {y}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    return torch::autograd::grad({dy.pow(2).sum()}, {x})[0];
  };
  CHECK(matches_float64(second(batched_matmul(a, b), a, b), second(at::matmul(ad, bd), ad, bd)));
}

TEST_CASE("scaled_dot_product_attention through batched_matmul is the float64 attention",
          "[detail][batched_matmul][attention]") {
  torch::manual_seed(14);
  auto q = torch::randn({2, 4, 50, 16}, torch::requires_grad()), k = torch::randn({2, 4, 50, 16}),
       v = torch::randn({2, 4, 50, 16});
  auto qd = q.detach().to(torch::kDouble).requires_grad_();
  auto out = ftopt::nn::scaled_dot_product_attention(q, k, v);
  auto out_d = ftopt::nn::scaled_dot_product_attention(qd, k.to(torch::kDouble), v.to(torch::kDouble));
  CHECK(matches_float64(out, out_d));
  auto upstream = torch::randn_like(out);
  CHECK(matches_float64(torch::autograd::grad({out}, {q}, {upstream})[0],
                 torch::autograd::grad({out_d}, {qd}, {upstream.to(torch::kDouble)})[0]));
}
