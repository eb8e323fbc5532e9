// Tests for include/ftopt/peft/full.hpp: full fine-tuning trains every parameter that requires
// grad, in the module's order, and keeps a parameter the user froze by hand frozen; attach and
// merge change nothing.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("peft::Full: every parameter that requires grad trains, and frozen ones stay out", "[peft]") {
  STATIC_REQUIRE(peft::Policy<peft::Full>);
  STATIC_REQUIRE(PolicyOf<peft::Full, axis::Peft>);
  auto model = test::small_mlp(14);  // layers.0.{weight,bias}, layers.2.{weight,bias}
  model->named_parameters()["layers.0.bias"].requires_grad_(false);
  const auto before = test::snapshot(*model);
  auto x = torch::randn({3, 6});
  const auto out = model->forward(x).detach();

  peft::Full full;
  full.attach(*model);
  const auto trainable = full.trainable_parameters(*model);
  const auto named = model->named_parameters();
  REQUIRE(trainable.size() == 3);
  CHECK(trainable[0].is_same(named["layers.0.weight"]));
  CHECK(trainable[1].is_same(named["layers.2.weight"]));
  CHECK(trainable[2].is_same(named["layers.2.bias"]));
  CHECK_FALSE(named["layers.0.bias"].requires_grad());  // attach did not thaw it

  full.merge(*model);
  CHECK(test::same_values(test::snapshot(*model), before));
  CHECK(torch::equal(model->forward(x), out));
  CHECK(model->parameters().size() == 4);  // nothing added
}
