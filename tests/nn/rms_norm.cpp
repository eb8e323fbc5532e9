// Tests for include/ftopt/nn/rms_norm.hpp: transformers' LlamaRMSNorm, written out here.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/nn/rms_norm.hpp>

#include "../isa.hpp"
#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("RmsNorm: weight * x / sqrt(mean(x^2) + eps), in float32 for a bf16 input", "[nn]") {
  nn::RmsNorm norm(6, 1e-5);
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::linspace(0.5, 2.0, 6));
  }
  const auto x = torch::randn({3, 4, 6});
  const auto expected = norm->weight * (x / torch::sqrt(x.pow(2).sum(-1, true) / 6 + 1e-5));
  CHECK(torch::allclose(norm(x), expected, 1e-6, 1e-6));

  // A bf16 input is normalized in float32 and cast back before the (float32) weight scales it.
  const auto xb = x.to(torch::kBFloat16);
  const auto x32 = xb.to(torch::kFloat);
  const auto normalized = (x32 / torch::sqrt(x32.pow(2).mean(-1, true) + 1e-5)).to(torch::kBFloat16);
  CHECK(torch::equal(norm(xb), norm->weight * normalized));

  auto y = norm(x.requires_grad_());
  y.sum().backward();
  CHECK(norm->weight.grad().defined());
  CHECK_THAT(test::message_of([] { nn::RmsNorm(0, 1e-5); }), Contains("nn::RmsNorm: size must be >= 1"));
}

namespace {

/// The formula in double precision through autograd, against the kernel's float32 on copy `isa`
/// (rows not a multiple of its 32-row blocks, widths with and without a tail past its 16 lanes).
void check_rms_norm_kernel(CpuIsa isa) {
  for (const auto& [rows, n] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 16}, {67, 37}, {70, 576}}) {
    INFO(rows << " rows of " << n);
    const auto x0 = torch::randn({rows, n}) * 3, w0 = torch::rand({n}) + 0.5, g = torch::randn({rows, n});
    auto x_ref = x0.to(torch::kDouble).requires_grad_(true), w_ref = w0.to(torch::kDouble).requires_grad_(true);
    const auto expected = w_ref * (x_ref / torch::sqrt(x_ref.pow(2).mean(-1, true) + 1e-5));
    expected.backward(g.to(torch::kDouble));
    REQUIRE(nn::rms_norm_fuses(x0, w0));
    std::vector<torch::Tensor> runs;
    for (const int threads : {1, 2}) {
      const test::ThreadsGuard guard(threads);
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      const auto y = nn::rms_norm(x, w, 1e-5, true, isa);
      y.backward(g);
      CHECK(torch::allclose(y.to(torch::kDouble), expected, 1e-5, 1e-5));
      CHECK(torch::allclose(x.grad().to(torch::kDouble), x_ref.grad(), 1e-4, 1e-5));
      CHECK(torch::allclose(w.grad().to(torch::kDouble), w_ref.grad(), 1e-4, 1e-4));
      runs.push_back(torch::cat({y.flatten(), x.grad().flatten(), w.grad()}));
    }
    CHECK(torch::equal(runs[0], runs[1]));
    // A frozen weight: the input's gradient alone, the same.
    auto x = x0.clone().requires_grad_(true);
    nn::rms_norm(x, w0, 1e-5, true, isa).backward(g);
    CHECK(torch::allclose(x.grad().to(torch::kDouble), x_ref.grad(), 1e-4, 1e-5));
    // Written out (fused = false), the ops give the same.
    CHECK(torch::allclose(nn::rms_norm(x0, w0, 1e-5, false), nn::rms_norm(x0, w0, 1e-5, true, isa), 1e-6, 1e-6));
  }
}

} // namespace

FTOPT_TEST_EACH_ISA("rms_norm: the fused kernel's values and gradients are the formula's, on any thread count", "[nn]",
                    check_rms_norm_kernel)
