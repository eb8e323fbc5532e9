// Tests for include/ftopt/nn/layer_norm.hpp: torch::nn::LayerNorm's options, names and values
// ((x - mean) / sqrt(var + eps) * weight + bias over the last dims, var biased), computed in the
// weight's dtype: a bf16 input to fp32 weights (as a bf16 autocast Linear hands it on) is
// normalized in fp32, as PyTorch's autocast runs layer_norm in fp32.
#include <catch2/catch.hpp>

#include <sstream>

#include <torch/torch.h>

#include <ftopt/nn/layer_norm.hpp>
#include <ftopt/weights/state_dict.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {

/// The formula, over the last dimension.
torch::Tensor layer_norm_formula(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                 double eps) {
  const auto mean = x.mean(-1, /*keepdim=*/true);
  const auto var = (x - mean).square().mean(-1, /*keepdim=*/true);
  return (x - mean) / torch::sqrt(var + eps) * weight + bias;
}

} // namespace

TEST_CASE("nn::LayerNorm is torch::nn::LayerNorm, normalizing in its weight's dtype", "[nn]") {
  const auto options = torch::nn::LayerNormOptions({8}).eps(1e-12);
  nn::LayerNorm ours(options);
  torch::nn::LayerNorm theirs(options);
  CHECK(test::state_dict_names(*ours) == test::state_dict_names(*theirs));  // "weight", "bias"
  CHECK(torch::equal(ours->weight, torch::ones({8})));
  CHECK(torch::equal(ours->bias, torch::zeros({8})));
  torch::manual_seed(19);
  {
    torch::NoGradGuard no_grad;
    ours->weight.uniform_(0.5, 1.5);
    ours->bias.uniform_(-0.5, 0.5);
  }
  weights::load_state_dict(*theirs, weights::state_dict(*ours));
  const auto x = torch::randn({3, 5, 8}) * 4 + 1;
  CHECK(torch::allclose(ours(x), theirs(x), 1e-5, 1e-6));
  CHECK(torch::allclose(ours(x), layer_norm_formula(x, ours->weight, ours->bias, 1e-12), 1e-5, 1e-5));

  SECTION("a bf16 input to fp32 weights: normalized in fp32, an fp32 output") {
    const auto half = x.to(torch::kBFloat16);
    const auto out = ours(half);
    CHECK(out.scalar_type() == torch::kFloat);
    CHECK(torch::allclose(out, theirs(half.to(torch::kFloat)), 1e-5, 1e-6));
  }
  SECTION("bf16 weights (Bf16True): a bf16 computation") {
    ours->to(torch::kBFloat16);
    const auto out = ours(x.to(torch::kBFloat16));
    CHECK(out.scalar_type() == torch::kBFloat16);
    CHECK(torch::allclose(out.to(torch::kFloat), theirs(x), 0.05, 0.05));
  }
  SECTION("no elementwise affine: no parameters, the plain normalization") {
    nn::LayerNorm plain(torch::nn::LayerNormOptions({8}).elementwise_affine(false));
    CHECK(plain->parameters().empty());
    CHECK(torch::allclose(plain(x), layer_norm_formula(x, torch::ones({8}), torch::zeros({8}), 1e-5), 1e-5, 1e-5));
  }
  SECTION("printed with its shape and eps") {
    std::ostringstream printed;
    ours->pretty_print(printed);
    CHECK(printed.str() == "ftopt::nn::LayerNorm([8], eps=1e-12)");
  }
}
