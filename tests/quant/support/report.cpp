// Tests for include/ftopt/quant/support/report.hpp: layer_errors gives each int8 layer's relative
// output error sqrt(sum ||y_int8 - y_float||^2 / sum ||y_float||^2) over the batches, where both
// outputs are computed from the input the quantized model feeds that layer (so an upstream error
// is not counted again), in module order; the model is left as it was.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <torch/torch.h>

#include <ftopt/models/mlp.hpp>
#include <ftopt/quant/dynamic_int8.hpp>
#include <ftopt/quant/support/report.hpp>

#include "../../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("layer_errors: each int8 layer's relative error on the input the quantized model feeds it", "[quant]") {
  torch::manual_seed(24);
  models::Mlp model({.in = 16, .hidden = {12}, .out = 5});  // layers.0, ReLU, layers.2
  test::Batches batches;
  for (int i = 0; i < 3; ++i) batches.emplace_back(torch::randn({4, 16}), torch::zeros({4}, torch::kLong));
  quant::DynamicInt8 policy;
  policy.convert(*model);
  auto modules = model->named_modules("", false);
  auto* first = modules["layers.0"]->as<nn::LinearImpl>();
  auto* second = modules["layers.2"]->as<nn::LinearImpl>();
  const auto kernel = first->extension();

  // The formula, by hand: the first layer sees x, the second the int8 model's hidden activations.
  auto expected = [&](std::size_t count) {
    double error[2] = {0, 0}, norm[2] = {0, 0};
    torch::NoGradGuard no_grad;
    for (std::size_t b = 0; b < count; ++b) {
      const auto x = batches[b].first;
      const auto h = first->forward(x);
      const auto y = second->forward(torch::relu(h));
      const torch::Tensor int8[2] = {h, y};
      const torch::Tensor reference[2] = {torch::nn::functional::linear(x, first->weight, first->bias),
                                          torch::nn::functional::linear(torch::relu(h), second->weight, second->bias)};
      for (int l = 0; l < 2; ++l) {
        error[l] += (int8[l] - reference[l]).to(torch::kDouble).square().sum().item<double>();
        norm[l] += reference[l].to(torch::kDouble).square().sum().item<double>();
      }
    }
    return std::vector<double>{std::sqrt(error[0] / norm[0]), std::sqrt(error[1] / norm[1])};
  };

  model->train();
  const auto errors = quant::layer_errors(model, batches);
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].layer == "layers.0");
  CHECK(errors[1].layer == "layers.2");
  const auto all = expected(3);
  for (int l = 0; l < 2; ++l) {
    CHECK(errors[static_cast<std::size_t>(l)].relative_error == Approx(all[static_cast<std::size_t>(l)]).epsilon(1e-6));
    CHECK(errors[static_cast<std::size_t>(l)].relative_error > 0);
  }
  // Left as it was: the same kernel attached, training mode back on.
  CHECK(first->extension() == kernel);
  CHECK(model->is_training());

  // Up to max_batches only.
  const auto one = quant::layer_errors(model, batches, 1);
  CHECK(one[0].relative_error == Approx(expected(1)[0]).epsilon(1e-6));
}

TEST_CASE("layer_errors names a model without int8 layers, and an empty batch range", "[quant][errors]") {
  models::Mlp model({.in = 6, .hidden = {4}, .out = 2});
  const test::Batches batches{{torch::randn({2, 6}), torch::zeros({2}, torch::kLong)}};
  CHECK_THAT(test::message_of([&] { quant::layer_errors(model, batches); }),
             Contains("quant::layer_errors: the model has no int8 layer (convert it first)"));
  quant::DynamicInt8().convert(*model);
  const auto kernel = model->named_modules("", false)["layers.0"]->as<nn::LinearImpl>()->extension();
  CHECK_THAT(test::message_of([&] { quant::layer_errors(model, test::Batches{}); }),
             Contains("quant::layer_errors: no batches"));
  CHECK(model->named_modules("", false)["layers.0"]->as<nn::LinearImpl>()->extension() == kernel);
}
