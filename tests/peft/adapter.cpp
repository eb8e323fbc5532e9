// Tests for include/ftopt/peft/adapter.hpp (Houlsby et al. 2019, "Parameter-Efficient Transfer
// Learning for NLP": y + up(act(down(y))) after a block's attention and MLP outputs, up at zero).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {
using AdapterTrainer = Trainer<precision::Fp32, peft::Adapter>;
} // namespace

TEST_CASE("Adapters sit after the attention and MLP outputs and start as the identity", "[peft][adapter]") {
  auto model = test::tiny_vit(1);
  model->eval();
  auto x = torch::randn({3, 1, 28, 28});
  auto before = model->forward(x).detach();
  AdapterTrainer trainer(quiet(), {}, peft::Adapter({.reduction_factor = 4}));
  const auto& trainable = trainer.prepare(model);
  CHECK(trainer.peft().adapted() == 4);  // 2 layers x (attention output, MLP output)
  CHECK(trainable.size() == 16);         // 4 adapters x (down w, b, up w, b)
  auto params = model->named_parameters();
  CHECK(params["vit.encoder.layer.0.attention.output.dense.adapter_down.weight"].sizes() == torch::IntArrayRef({4, 16}));
  CHECK(params.contains("vit.encoder.layer.1.output.dense.adapter_up.bias"));
  CHECK_FALSE(params.contains("vit.encoder.layer.1.intermediate.dense.adapter_up.bias"));
  for (const auto& item : params) CHECK(item.value().requires_grad() == (item.key().find(".adapter_") != std::string::npos));
  CHECK(torch::equal(model->forward(x), before));
}

TEST_CASE("An adapter computes y + up(gelu(down(y)))", "[peft][adapter]") {
  torch::manual_seed(2);
  torch::nn::Sequential net(nn::Linear(6, 8));
  peft::Adapter adapter({.reduction_factor = 2, .targets = {"0"}});
  adapter.attach(*net);
  auto* layer = net[0]->as<nn::LinearImpl>();
  auto branch = std::dynamic_pointer_cast<peft::AdapterBranch>(layer->extension());
  REQUIRE(branch);
  torch::NoGradGuard no_grad;
  branch->up()->weight.normal_();
  auto x = torch::randn({5, 6});
  auto y = torch::linear(x, layer->weight, layer->bias);
  auto expected = y + torch::linear(torch::gelu(torch::linear(y, branch->down()->weight, branch->down()->bias)),
                                    branch->up()->weight, branch->up()->bias);
  CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-6));
}

TEST_CASE("Training with adapters moves only the adapters (and a kept head)", "[peft][adapter]") {
  auto model = test::tiny_vit(3);
  AdapterTrainer trainer(quiet({.epochs = 5}), {}, peft::Adapter({.reduction_factor = 4, .modules_to_save = {"classifier"}}));
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
  auto frozen = model->named_parameters()["vit.encoder.layer.0.attention.attention.key.weight"].clone();
  torch::manual_seed(4);
  auto summary = trainer.fit(model, optimizer, test::Batches{{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32})}});
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  CHECK(torch::equal(model->named_parameters()["vit.encoder.layer.0.attention.attention.key.weight"], frozen));
  CHECK(model->named_parameters()["classifier.weight"].requires_grad());
}

TEST_CASE("Adapter names its mistakes", "[peft][adapter][errors]") {
  CHECK_THAT(test::message_of([] { AdapterTrainer(quiet(), {}, peft::Adapter({.reduction_factor = 0})); }),
             Catch::Contains("reduction_factor must be >= 1, got 0"));
  auto mlp = test::small_mlp();
  AdapterTrainer trainer(quiet(), {}, peft::Adapter{});
  CHECK_THAT(test::message_of([&] { trainer.prepare(mlp); }),
             Catch::Contains("match no module; module names here: 0, 1, 2, layers"));
}
