// Tests for include/ftopt/precision/fp32.hpp: the baseline adds no work. prepare leaves the
// weights as they are, the forward runs without autocast (a Linear on float32 stays float32,
// where Bf16Mixed's scope gives bfloat16), and the loss takes the output itself.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("precision::Fp32: weights untouched, no autocast, the output is the loss input", "[precision]") {
  STATIC_REQUIRE(precision::Policy<precision::Fp32>);
  STATIC_REQUIRE(PolicyOf<precision::Fp32, axis::Precision>);
  STATIC_REQUIRE_FALSE(rules::autocasts_to_fp16<precision::Fp32>);
  STATIC_REQUIRE_FALSE(rules::skips_non_finite_steps<precision::Fp32>);
  auto model = test::small_mlp(12);
  const auto before = test::snapshot(*model);
  precision::Fp32 fp32;
  fp32.prepare(*model);
  CHECK(test::same_values(test::snapshot(*model), before));
  for (const auto& p : model->parameters()) {
    CHECK(p.scalar_type() == torch::kFloat);
    CHECK(p.requires_grad());
  }

  const auto x = torch::randn({4, 6});
  torch::Tensor out;
  {
    [[maybe_unused]] const auto scope = fp32.forward_scope();
    out = model->forward(x);
  }
  CHECK(out.scalar_type() == torch::kFloat);
  CHECK(torch::equal(out, model->forward(x)));
  CHECK(fp32.loss_input(out).is_same(out));

  // The same forward under Bf16Mixed's scope is autocast: what the check above would catch.
  precision::Bf16Mixed bf16;
  bf16.prepare(*model);
  {
    [[maybe_unused]] const auto scope = bf16.forward_scope();
    CHECK(model->forward(x).scalar_type() == torch::kBFloat16);
  }
}
