// Tests for include/ftopt/nn/linear.hpp, conv2d.hpp and extension.hpp: drop-in for torch::nn.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/nn/conv2d.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/weights/state_dict.hpp>

using namespace ftopt;

namespace {
std::vector<std::string> names_of(const torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& item : weights::state_dict(m)) out.push_back(item.key());
  return out;
}
} // namespace

TEST_CASE("nn::Linear is torch::nn::Linear with an attach point", "[nn]") {
  torch::nn::Linear theirs(torch::nn::LinearOptions(5, 3));
  nn::Linear ours(torch::nn::LinearOptions(5, 3));
  CHECK(names_of(*ours) == names_of(*theirs));
  weights::load_state_dict(*ours, weights::state_dict(*theirs));
  auto x = torch::randn({4, 5});
  CHECK(torch::equal(ours(x), theirs(x)));

  nn::Linear no_bias(torch::nn::LinearOptions(5, 3).bias(false));
  CHECK(names_of(*no_bias) == std::vector<std::string>{"weight"});

  SECTION("initialization: weight and bias within torch's bounds") {
    // kaiming_uniform(a = sqrt(5)) gives bound sqrt(6 / ((1 + 5) * fan_in)) = 1 / sqrt(fan_in).
    nn::Linear big(torch::nn::LinearOptions(400, 300));
    const double bound = 1.0 / std::sqrt(400.0);
    CHECK(big->weight.abs().max().item<double>() <= bound);
    CHECK(big->weight.abs().max().item<double>() > 0.9 * bound);
    CHECK(big->bias.abs().max().item<double>() <= bound);
  }
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

TEST_CASE("nn::Conv2d is torch::nn::Conv2d with an attach point", "[nn]") {
  auto options = torch::nn::Conv2dOptions(3, 8, 3).stride(2).padding(1).groups(1);
  torch::nn::Conv2d theirs(options);
  nn::Conv2d ours(options);
  CHECK(names_of(*ours) == names_of(*theirs));
  weights::load_state_dict(*ours, weights::state_dict(*theirs));
  auto x = torch::randn({2, 3, 9, 9});
  CHECK(torch::allclose(ours(x), theirs(x)));
  nn::Conv2d grouped(torch::nn::Conv2dOptions(4, 8, 3).groups(2).bias(false));
  CHECK(grouped->weight.sizes() == torch::IntArrayRef({8, 2, 3, 3}));
  CHECK_THROWS_WITH(nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(torch::kSame)),
                    Catch::Contains("padding must be given as sizes"));
}
