// Tests for include/ftopt/memory/none.hpp: the baseline keeps every activation and adds no work:
// its forward is the model's own call, with the same autograd graph (the gradients of
// model->forward), and it steps once per `accumulate` micro-batches.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::message_of;
using ftopt::test::quiet;
using Catch::Matchers::Contains;

TEST_CASE("memory::None: the model's own forward and gradients, one step per accumulate", "[memory]") {
  STATIC_REQUIRE(memory::Policy<memory::None>);
  STATIC_REQUIRE(PolicyOf<memory::None, axis::Memory>);
  auto model = test::small_mlp(3);
  const auto x = torch::randn({5, 6});
  memory::None none;
  const auto got = none.forward(model, x);
  // The same values as the direct call (bit for bit: nothing recomputed, nothing cast) ...
  const auto want = model->forward(x);
  CHECK(torch::equal(got, want));
  // ... and the graph the direct call builds: the gradients of sum(out^2) are bit for bit those
  // without the policy (memory/concept.cpp's laws allow other policies their rounding).
  want.square().sum().backward();
  std::vector<torch::Tensor> direct_grads;
  for (auto& p : model->parameters()) direct_grads.push_back(p.grad().clone()), p.mutable_grad().reset();
  got.square().sum().backward();
  const auto params = model->parameters();
  REQUIRE(params.size() == direct_grads.size());
  for (std::size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(params[i].grad(), direct_grads[i]));

  CHECK(none.accumulation() == 1);
  CHECK(memory::None{.accumulate = 4}.accumulation() == 4);
  CHECK(std::string(memory::None::name) == "none");
}

TEST_CASE("memory::None: a bad accumulate is rejected with the value", "[trainer][errors]") {
  CHECK_THAT(message_of([] {
               Trainer<precision::Fp32, peft::Full, memory::None>(quiet(), {}, {}, {.accumulate = 0});
             }),
             Contains("memory::None: accumulate must be >= 1, got 0"));
}
