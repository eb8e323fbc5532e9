// Tests for include/ftopt/nn/rms_norm.hpp: transformers' LlamaRMSNorm, written out here.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/nn/rms_norm.hpp>

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
