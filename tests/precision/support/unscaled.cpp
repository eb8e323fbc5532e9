// Tests for include/ftopt/precision/support/unscaled.hpp: the hooks of a policy without loss
// scaling. backward is loss.backward() (d/dw of sum(w^2 * c) is 2 c w), unscale leaves the
// gradients as they are, step takes the optimizer's step every time (SGD: w - lr * grad) and
// says so, update does nothing.
#include <catch2/catch.hpp>

#include <limits>

#include <torch/torch.h>

#include <ftopt.hpp>

using namespace ftopt;

TEST_CASE("precision::Unscaled: plain backward, nothing to unscale, every step taken", "[precision]") {
  auto w = torch::tensor({1.0, -2.0, 3.0}, torch::requires_grad());
  torch::optim::SGD optimizer({w}, torch::optim::SGDOptions(0.5));
  precision::Unscaled hooks;
  const auto c = torch::tensor({1.0, 2.0, 0.5});

  hooks.backward((w * w * c).sum());
  const auto expected_grad = 2 * c * w.detach();  // {2, -8, 3}
  CHECK(torch::allclose(w.grad(), expected_grad));

  const auto* storage = w.grad().data_ptr();
  hooks.unscale(optimizer);
  CHECK(w.grad().data_ptr() == storage);
  CHECK(torch::allclose(w.grad(), expected_grad));

  CHECK(hooks.step(optimizer));
  hooks.update();
  // w - 0.5 * {2, -8, 3} = {0, 2, 1.5}
  CHECK(torch::allclose(w.detach(), torch::tensor({0.0, 2.0, 1.5})));

  // A non-finite gradient is stepped on as well: skipping is loss scaling's business.
  w.mutable_grad().fill_(std::numeric_limits<double>::infinity());
  CHECK(hooks.step(optimizer));
  CHECK(torch::isinf(w.detach()).all().item<bool>());

  // Fp32, Bf16Mixed and Bf16True are these hooks.
  STATIC_REQUIRE(std::is_base_of_v<precision::Unscaled, precision::Fp32>);
  STATIC_REQUIRE(std::is_base_of_v<precision::Unscaled, precision::Bf16Mixed>);
  STATIC_REQUIRE(std::is_base_of_v<precision::Unscaled, precision::Bf16True>);
}
