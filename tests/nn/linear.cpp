// Tests for include/ftopt/nn/linear.hpp (and the attach point of extension.hpp): a drop-in for
// torch::nn::Linear.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/nn/linear.hpp>
#include <ftopt/weights/state_dict.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("nn::Linear is torch::nn::Linear with an attach point", "[nn]") {
  torch::nn::Linear theirs(torch::nn::LinearOptions(5, 3));
  nn::Linear ours(torch::nn::LinearOptions(5, 3));
  CHECK(test::state_dict_names(*ours) == test::state_dict_names(*theirs));
  weights::load_state_dict(*ours, weights::state_dict(*theirs));
  auto x = torch::randn({4, 5});
  CHECK(torch::equal(ours(x), theirs(x)));

  nn::Linear no_bias(torch::nn::LinearOptions(5, 3).bias(false));
  CHECK(test::state_dict_names(*no_bias) == std::vector<std::string>{"weight"});

  SECTION("an attached extension replaces the forward, detach restores it") {
    struct Doubling : nn::Extension<nn::LinearImpl> {
      torch::Tensor forward(nn::LinearImpl& layer, const torch::Tensor& input) override {
        return 2 * layer.base_forward(input);
      }
    };
    auto before = ours(x);
    ours->attach(std::make_shared<Doubling>());
    CHECK(torch::allclose(ours(x), 2 * before));
    ours->detach();
    CHECK(torch::equal(ours(x), before));
  }
}
