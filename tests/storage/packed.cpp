// Tests for include/ftopt/storage/packed.hpp: what a storage format is (storage::Format). A format
// written here, the weight held in bf16 (two bytes a value, one rounding), is a frozen base for
// peft::QLora and the adapter kernel as the shipped formats are: the LoRA formula over its
// dequantized base, values and gradients, alone and for layers on one input.
#include <catch2/catch.hpp>

#include <array>
#include <string>

#include <torch/torch.h>

#include <ftopt/nn/shared_input_linears.hpp>
#include <ftopt/peft/qlora.hpp>
#include <ftopt/storage/int8_per_channel.hpp>
#include <ftopt/storage/nf4.hpp>
#include <ftopt/storage/packed.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {

/// A user's format: the weight rounded to bf16.
struct Bf16Storage {
  static constexpr const char* lora_name = "lora-bf16-storage";
  void validate() const {}
  void check(const at::Tensor& weight, const std::string& module) const {
    ftopt::detail::check(weight.dim() == 2, "Bf16Storage: '", module, "' is not a matrix");
  }
  storage::PackedWeight quantize(const at::Tensor& weight) const {
    return {.data = weight.detach().to(at::kBFloat16), .scales = at::ones({1}), .shape = weight.sizes().vec()};
  }
  static at::Tensor dequantize(const storage::PackedWeight& packed, at::ScalarType dtype) {
    return packed.data.to(dtype);
  }
};

struct NotAFormat {
  void validate() const {}
};

} // namespace

static_assert(storage::Format<storage::Int8PerChannel>);
static_assert(storage::Format<storage::Nf4>);
static_assert(storage::Format<Bf16Storage>);
static_assert(!storage::Format<NotAFormat>);

TEST_CASE("A format written by a user is a QLoRA base: LoRA's formula over its dequantized weight",
          "[storage][qlora]") {
  torch::manual_seed(12);
  torch::nn::Sequential net(nn::Linear(16, 12), nn::Linear(16, 12), nn::Linear(16, 8));
  // Each base as the layer computes with it: the adapted ones (0 and 2) as the format holds them,
  // the middle one, not a target, in float.
  std::array<torch::Tensor, 3> rounded;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto w = net[i]->as<nn::LinearImpl>()->weight.detach().clone();
    rounded[i] = i == 1 ? w : w.to(at::kBFloat16).to(at::kFloat);
  }
  peft::QLora<Bf16Storage> qlora({.r = 4, .alpha = 8, .targets = {"0", "2"}});
  qlora.attach(*net);
  REQUIRE(qlora.bases().size() == 2);
  CHECK(qlora.base_bytes() == (12 * 16 + 8 * 16) * 2 + 2 * 4);  // bf16 values and the unit scales
  {
    torch::NoGradGuard no_grad;  // B away from zero, so that the branch shows
    for (const auto& [name, branch] : qlora.branches()) branch->b()->weight.normal_();
  }
  const std::array<nn::LinearImpl*, 3> layers{net[0]->as<nn::LinearImpl>(), net[1]->as<nn::LinearImpl>(),
                                              net[2]->as<nn::LinearImpl>()};
  const auto x = torch::randn({5, 16});
  for (const bool together : {true, false}) {
    INFO("layers on one input " << (together ? "as one kernel call" : "one by one"));
    for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
    auto input = x.clone().requires_grad_(true);
    const auto out = nn::shared_input_linears<3>(layers, input, together);
    const auto got = test::outputs_and_gradients({out.begin(), out.end()}, input, *net);
    // The formula, on copies: x W^T + b, plus s B A x on the adapted layers (0 and 2).
    auto input2 = x.clone().requires_grad_(true);
    std::vector<torch::Tensor> leaves;
    std::array<torch::Tensor, 3> want;
    std::size_t branch = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      want[i] = at::linear(input2, rounded[i], layers[i]->bias.detach());
      if (i == 1) continue;
      const auto& b = qlora.branches()[branch++].second;
      auto a = b->a()->weight.detach().clone().requires_grad_(true);
      auto bb = b->b()->weight.detach().clone().requires_grad_(true);
      want[i] = want[i] + 2.0 * at::linear(at::linear(input2, a), bb);
      leaves.insert(leaves.end(), {a, bb});
    }
    torch::manual_seed(3);
    torch::Tensor loss = torch::zeros({});
    for (const auto& o : want) loss = loss + (o * torch::randn(o.sizes())).sum();
    loss.backward();
    REQUIRE(got.size() == 3 + 1 + 4);  // outputs, x, A and B of two branches
    for (std::size_t i = 0; i < 3; ++i) CHECK(torch::allclose(got[i], want[i], 1e-5, 1e-5));
    CHECK(torch::allclose(got[3], input2.grad(), 1e-5, 1e-5));
    for (std::size_t j = 0; j < 4; ++j) CHECK(torch::allclose(got[4 + j], leaves[j].grad(), 1e-4, 1e-5));
  }
}
