// Tests for include/ftopt/nn/init.hpp: reset_like_torch draws what torch::nn::Linear's and
// torch::nn::Conv2d's own reset_parameters() draw from the same seed (weight
// kaiming_uniform_(a = sqrt(5)), then bias uniform in +-1 / sqrt(fan_in)), and stays within those
// bounds; a layer without bias gets its weight only.
#include <catch2/catch.hpp>

#include <cmath>

#include <torch/torch.h>

#include <ftopt/nn/init.hpp>
#include <ftopt/nn/linear.hpp>

using namespace ftopt;

TEST_CASE("reset_like_torch: the values torch's Linear and Conv2d draw from the same seed", "[nn]") {
  SECTION("Linear: fan_in = in_features") {
    torch::manual_seed(16);
    torch::nn::Linear theirs(torch::nn::LinearOptions(7, 5));
    torch::manual_seed(16);
    auto weight = torch::empty({5, 7}), bias = torch::empty({5});
    nn::detail::reset_like_torch(weight, bias);
    CHECK(torch::equal(weight, theirs->weight.detach()));
    CHECK(torch::equal(bias, theirs->bias.detach()));
  }
  SECTION("Conv2d: fan_in = in_channels / groups * kernel height * kernel width") {
    torch::manual_seed(17);
    torch::nn::Conv2d theirs(torch::nn::Conv2dOptions(4, 6, {3, 2}).groups(2));
    torch::manual_seed(17);
    auto weight = torch::empty({6, 2, 3, 2}), bias = torch::empty({6});
    nn::detail::reset_like_torch(weight, bias);
    CHECK(torch::equal(weight, theirs->weight.detach()));
    CHECK(torch::equal(bias, theirs->bias.detach()));
    CHECK(bias.abs().max().item<double>() <= 1.0 / std::sqrt(2.0 * 3 * 2));
  }
  SECTION("no bias: the weight only, the same draw") {
    torch::manual_seed(18);
    torch::nn::Linear theirs(torch::nn::LinearOptions(7, 5).bias(false));
    torch::manual_seed(18);
    auto weight = torch::empty({5, 7});
    torch::Tensor none;
    nn::detail::reset_like_torch(weight, none);
    CHECK_FALSE(none.defined());
    CHECK(torch::equal(weight, theirs->weight.detach()));
  }
}

TEST_CASE("reset_like_torch: weight and bias within torch's bounds", "[nn]") {
  // kaiming_uniform(a = sqrt(5)) gives bound sqrt(6 / ((1 + 5) * fan_in)) = 1 / sqrt(fan_in).
  nn::Linear big(torch::nn::LinearOptions(400, 300));
  const double bound = 1.0 / std::sqrt(400.0);
  CHECK(big->weight.abs().max().item<double>() <= bound);
  CHECK(big->weight.abs().max().item<double>() > 0.9 * bound);
  CHECK(big->bias.abs().max().item<double>() <= bound);
}
