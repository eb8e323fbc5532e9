// The laws of include/ftopt/quant/concept.hpp, checked on every Quant policy through one suite:
// prepare leaves the float forward unchanged unless the policy trains fake-quantized, and
// convert keeps the outputs within the int8 error the policies document (5% relative here; docs/quant.md).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {

double quant_law_error(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got - want).norm() / want.norm()).item<double>();
}

} // namespace

TEMPLATE_TEST_CASE("Every Quant policy keeps the Quant laws", "[quant][laws]", quant::None, quant::DynamicInt8,
                   quant::StaticInt8, quant::Qat) {
  STATIC_REQUIRE(quant::Policy<TestType>);
  torch::manual_seed(60);
  models::Mlp model({.in = 32, .hidden = {64}, .out = 10});
  const auto x = torch::randn({256, 32}), y = torch::randint(10, {256});
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int i = 0; i < 4; ++i) batches.emplace_back(x.narrow(0, 64 * i, 64), y.narrow(0, 64 * i, 64));
  torch::NoGradGuard no_grad;
  model->eval();
  const auto float_out = model->forward(x).detach();

  TestType policy;
  policy.prepare(*model);
  constexpr bool fake_quant = requires { requires TestType::fake_quant_training; };
  if constexpr (!fake_quant) {
    CHECK(torch::equal(model->forward(x), float_out));  // law 1
  } else {
    model->train();  // QAT's observers see the training forwards, then the ranges are used
    for (const auto& [bx, by] : batches) model->forward(bx);
    model->eval();
    CHECK(quant_law_error(model->forward(x), float_out) < 0.05);  // fake-quantized, close
  }
  if constexpr (requires { policy.calibrate(model, batches); }) policy.calibrate(model, batches);
  policy.convert(*model);
  const auto converted = model->forward(x);
  if constexpr (std::is_same_v<TestType, quant::None>) CHECK(torch::equal(converted, float_out));
  else CHECK(quant_law_error(converted, float_out) < 0.05);  // law 2
}
