// Tests for include/ftopt/trainer/inputs.hpp: the Trainer's default device (CUDA where LibTorch
// sees one), a tensor already on the device left as it is (no copy), and the input cast only by
// a precision policy that has forward_input (precision::Bf16True: floating inputs to bf16).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

using namespace ftopt;

TEST_CASE("default_device, on_device and policy_input", "[trainer]") {
  CHECK(trainer::default_device() ==
        (torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU)));

  const auto x = torch::randn({2, 3});
  CHECK(trainer::on_device(x, torch::kCPU).is_same(x));  // already there: the same tensor
  // Elsewhere: moved (the meta device holds shapes only, and runs on any machine).
  const auto moved = trainer::on_device(x, torch::Device(torch::kMeta));
  CHECK(moved.device().type() == torch::kMeta);
  CHECK(moved.sizes() == x.sizes());
  CHECK(moved.scalar_type() == x.scalar_type());

  // No forward_input: the input itself.
  CHECK(trainer::policy_input(precision::Fp32{}, x).is_same(x));
  CHECK(trainer::policy_input(precision::Bf16Mixed{}, x).is_same(x));
  // Bf16True: a float input as bf16, with the values bf16 rounds them to; token ids stay int64.
  const auto cast = trainer::policy_input(precision::Bf16True{}, x);
  CHECK(cast.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(cast, x.to(torch::kBFloat16)));
  const auto ids = torch::tensor({{1, 2, 3}}, torch::kLong);
  CHECK(trainer::policy_input(precision::Bf16True{}, ids).is_same(ids));
}
