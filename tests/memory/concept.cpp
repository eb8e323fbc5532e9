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
    torch::manual_seed(52);
    test::Batches micro;
    for (int i = 0; i < 4; ++i) micro.emplace_back(torch::randn({8, 1, 28, 28}), torch::randint(0, 10, {8}));
    std::vector<torch::Tensor> xs, ys;
    for (auto& [mx, my] : micro) xs.push_back(mx), ys.push_back(my);
    const test::Batches whole{{torch::cat(xs), torch::cat(ys)}};
    auto a = test::tiny_vit(53), b = test::tiny_vit(53);
    Trainer<precision::Fp32, peft::Full, TestType> by_four(test::quiet(), {}, {}, TestType{.accumulate = 4});
    Trainer<precision::Fp32, peft::Full, TestType> at_once(test::quiet());
    CHECK(by_four.memory().accumulation() == 4);
    torch::optim::SGD opt_a(by_four.prepare(a), torch::optim::SGDOptions(0.5));
    torch::optim::SGD opt_b(at_once.prepare(b), torch::optim::SGDOptions(0.5));
    CHECK(by_four.fit(a, opt_a, micro).epochs[0].optimizer_steps == 1);
    at_once.fit(b, opt_b, whole);
    const auto pa = test::snapshot(*a), pb = test::snapshot(*b);
    for (std::size_t i = 0; i < pa.size(); ++i) CHECK(torch::allclose(pa[i], pb[i], 1e-4, 1e-6));
  }
}
