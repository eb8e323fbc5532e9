// Tests for include/ftopt/nn/conv2d.hpp: a drop-in for torch::nn::Conv2d with an attach point.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/nn/conv2d.hpp>
#include <ftopt/weights/state_dict.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("nn::Conv2d is torch::nn::Conv2d with an attach point", "[nn]") {
  auto options = torch::nn::Conv2dOptions(3, 8, 3).stride(2).padding(1).groups(1);
  torch::nn::Conv2d theirs(options);
  nn::Conv2d ours(options);
  CHECK(test::state_dict_names(*ours) == test::state_dict_names(*theirs));
  weights::load_state_dict(*ours, weights::state_dict(*theirs));
  auto x = torch::randn({2, 3, 9, 9});
  CHECK(torch::allclose(ours(x), theirs(x)));
  nn::Conv2d grouped(torch::nn::Conv2dOptions(4, 8, 3).groups(2).bias(false));
  CHECK(grouped->weight.sizes() == torch::IntArrayRef({8, 2, 3, 3}));
  CHECK_THROWS_WITH(nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(torch::kSame)),
                    Catch::Contains("padding must be given as sizes"));
}
