// Tests for include/ftopt/trainer/gradients.hpp: zero_grad sets the gradients to none (PyTorch
// 2.x's optimizer.zero_grad(set_to_none=True)), unless the Parallel policy asks for them zeroed
// in place (its gradients alias its communication buffers): then the same storage holds zeros.
#include <catch2/catch.hpp>

#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>

using namespace ftopt;

namespace {

/// A Parallel policy's one member zero_grad reads.
struct InPlace {
  bool in_place = true;
  bool zero_grads_in_place() const { return in_place; }
};

/// Two parameters with gradients, and one no backward reached.
std::vector<torch::Tensor> with_gradients() {
  auto a = torch::ones({2, 3}, torch::requires_grad()), b = torch::ones({3}, torch::requires_grad());
  auto unused = torch::ones({4}, torch::requires_grad());
  (a * 2).sum().add((b * 3).sum()).backward();
  return {a, b, unused};
}

} // namespace

TEST_CASE("zero_grad: gradients to none, or zeroed in place where the Parallel policy asks", "[trainer]") {
  SECTION("a policy without zero_grads_in_place (parallel::Single): set to none") {
    auto params = with_gradients();
    REQUIRE(params[0].grad().defined());
    trainer::zero_grad(parallel::Single{}, params);
    for (const auto& p : params) CHECK_FALSE(p.grad().defined());
  }
  SECTION("zero_grads_in_place() true: the same storage, now zeros; an undefined gradient stays so") {
    auto params = with_gradients();
    const auto* storage = params[0].grad().data_ptr();
    CHECK(params[0].grad().eq(2).all().item<bool>());
    trainer::zero_grad(InPlace{}, params);
    CHECK(params[0].grad().data_ptr() == storage);
    CHECK(torch::equal(params[0].grad(), torch::zeros({2, 3})));
    CHECK(torch::equal(params[1].grad(), torch::zeros({3})));
    CHECK_FALSE(params[2].grad().defined());
  }
  SECTION("zero_grads_in_place() false: set to none") {
    auto params = with_gradients();
    trainer::zero_grad(InPlace{.in_place = false}, params);
    for (const auto& p : params) CHECK_FALSE(p.grad().defined());
  }
}
