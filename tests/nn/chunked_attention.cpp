// Tests for include/ftopt/nn/chunked_attention.hpp: softmax(q k^T / sqrt(d)) v over blocks of query
// rows, against nn::scaled_dot_product_attention (forward and backward), and no attention matrix
// kept for the backward. The ViT with chunked attention: checkpoint.cpp.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/memory/support/peak.hpp>
#include <ftopt/nn/attention.hpp>
#include <ftopt/nn/chunked_attention.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("Chunked attention matches softmax(q k^T / sqrt(d)) v, forward and backward", "[nn][attention]") {
  torch::manual_seed(9);
  struct Case {
    std::int64_t L, S, chunk;
    bool causal;
  };
  for (const auto& c : {Case{10, 10, 3, false}, Case{10, 10, 16, false}, Case{7, 12, 4, false}, Case{9, 9, 2, true}}) {
    INFO("L " << c.L << " S " << c.S << " chunk " << c.chunk << " causal " << c.causal);
    auto q = torch::randn({2, 3, c.L, 8}, torch::kDouble).requires_grad_(true);
    auto k = torch::randn({2, 3, c.S, 8}, torch::kDouble).requires_grad_(true);
    auto v = torch::randn({2, 3, c.S, 5}, torch::kDouble).requires_grad_(true);
    const auto go = torch::randn({2, 3, c.L, 5}, torch::kDouble);
    auto reference = nn::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, c.causal);
    auto want = torch::autograd::grad({reference}, {q, k, v}, {go});
    auto out = nn::chunked_attention(q, k, v, {.chunk = c.chunk, .is_causal = c.causal});
    auto got = torch::autograd::grad({out}, {q, k, v}, {go});
    CHECK(torch::allclose(out, reference, 1e-10, 1e-12));
    for (int i = 0; i < 3; ++i) CHECK(torch::allclose(got[i], want[i], 1e-9, 1e-11));
  }
  // Its analytic backward agrees with finite differences (double precision).
  auto q = torch::randn({1, 2, 5, 4}, torch::kDouble).requires_grad_(true);
  auto k = torch::randn({1, 2, 6, 4}, torch::kDouble).requires_grad_(true);
  auto v = torch::randn({1, 2, 6, 3}, torch::kDouble).requires_grad_(true);
  const auto go = torch::randn({1, 2, 5, 3}, torch::kDouble);
  auto analytic = torch::autograd::grad({nn::chunked_attention(q, k, v, {.chunk = 2})}, {q}, {go})[0];
  torch::NoGradGuard no_grad;
  const double h = 1e-6;
  auto numeric = torch::zeros_like(q);
  for (std::int64_t i = 0; i < q.numel(); ++i) {
    auto plus = q.clone(), minus = q.clone();
    plus.view(-1)[i] += h;
    minus.view(-1)[i] -= h;
    numeric.view(-1)[i] = ((nn::chunked_attention(plus, k, v, {.chunk = 2}) -
                            nn::chunked_attention(minus, k, v, {.chunk = 2})) * go).sum() / (2 * h);
  }
  CHECK(torch::allclose(analytic, numeric, 1e-6, 1e-8));
}

TEST_CASE("Chunked attention keeps no attention matrix for the backward", "[nn][attention][memory]") {
  // B 1, H 2, L = S 512, d 16, float32: attention written out, softmax(q k^T / sqrt(d)) v, keeps
  // the [512, 512] probabilities of each head (2 MiB) for the backward; the chunked one only
  // [chunk, 512] at a time. (LibTorch 2.x's fused CPU kernel behind compat's SDPA keeps none
  // either; 1.13's compat path is the written-out math.)
  torch::manual_seed(10);
  auto q = torch::randn({1, 2, 512, 16}).requires_grad_(true);
  auto k = torch::randn({1, 2, 512, 16}).requires_grad_(true);
  auto v = torch::randn({1, 2, 512, 16}).requires_grad_(true);
  auto peak_of = [&](auto&& attend) {
    memory::PeakMemory::reset();
    attend().sum().backward();
    return memory::PeakMemory::peak();
  };
  const auto math = peak_of([&] { return torch::softmax(q.matmul(k.transpose(-2, -1)) / 4.0, -1).matmul(v); });
  const auto chunked = peak_of([&] { return nn::chunked_attention(q, k, v, {.chunk = 64}); });
  const std::size_t matrix = 2 * 512 * 512 * sizeof(float);
  INFO("math " << math << " bytes, chunked " << chunked << " bytes");
  CHECK(math >= 2 * matrix);
  CHECK(chunked < matrix / 2);
}
