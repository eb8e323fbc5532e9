// The laws of include/ftopt/memory/concept.hpp, checked on every Memory policy through one
// suite: forward equals the model's forward (values and gradients), and N accumulated
// micro-batches of b equal one batch of N*b.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;

TEMPLATE_TEST_CASE("Every Memory policy keeps the Memory laws", "[memory][laws]", memory::None, memory::Checkpoint) {
  STATIC_REQUIRE(memory::Policy<TestType>);
  torch::manual_seed(50);
  const auto x = torch::randn({8, 1, 28, 28});

  SECTION("forward is the model's forward, gradients included") {
    auto plain = test::tiny_vit(51), policed = test::tiny_vit(51);
    Trainer<precision::Fp32, peft::Full, TestType> trainer(test::quiet());
    trainer.prepare(policed);
    const auto want = plain->forward(x);
    const auto got = trainer.memory().forward(policed, x);
    CHECK(torch::allclose(got, want, 1e-5, 1e-6));
    want.square().sum().backward();
    got.square().sum().backward();
    const auto a = plain->parameters(), b = policed->parameters();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(torch::allclose(b[i].grad(), a[i].grad(), 1e-4, 1e-6));
  }
  SECTION("4 accumulated micro-batches of 8 equal one batch of 32") {
    using T = Trainer<precision::Fp32, peft::Full, TestType>;
    CHECK(T(test::quiet(), {}, {}, TestType{.accumulate = 4}).memory().accumulation() == 4);
    CHECK(test::accumulated_against_whole(T(test::quiet(), {}, {}, TestType{.accumulate = 4}), T(test::quiet())) < 1e-5);
  }
}
