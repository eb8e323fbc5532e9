// Tests for include/ftopt/peft/ia3.hpp against HF PEFT's IA3 semantics
// (peft/tuners/ia3/layer.py, PEFT 0.21: a target's output times l [out, 1], a feedforward
// target's input times l [1, in], l starting at ones; merge W * l, and b * l for a plain target),
// written out here; tests/peer/ia3.py checks the same against the real PEFT.
#include <catch2/catch.hpp>

#include <fstream>
#include <optional>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/peft/ia3.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {
using Ia3Trainer = Trainer<precision::Fp32, peft::Ia3>;
/// The ViT's MLP output Linear (layer.N.output.dense), not the attention's output.dense.
const nn::NamePattern mlp_output = nn::regex(R"((.*\.)?layer\.\d+\.output\.dense)");

/// Two Linears, 6 -> 5 -> 4, both IA3 targets, the second a feedforward one; l0 and l1 their vectors.
struct TwoTargets {
  explicit TwoTargets(std::uint64_t seed)
      : net((torch::manual_seed(seed), torch::nn::Sequential(nn::Linear(6, 5), nn::Linear(5, 4)))),
        ia3({.targets = {"0", "1"}, .feedforward = {"1"}}) {
    ia3.attach(*net);
    first = net[0]->as<nn::LinearImpl>();
    second = net[1]->as<nn::LinearImpl>();
    l0 = ia3.scalings()[0].second->scale();
    l1 = ia3.scalings()[1].second->scale();
  }
  torch::nn::Sequential net;
  peft::Ia3 ia3;
  nn::LinearImpl* first = nullptr;
  nn::LinearImpl* second = nullptr;
  torch::Tensor l0, l1;
};
} // namespace

TEST_CASE("IA3 scales a target's output and a feedforward target's input", "[peft][ia3]") {
  TwoTargets two(51);
  auto& [net, ia3, first, second, l0, l1] = two;
  CHECK(l0.sizes() == torch::IntArrayRef({5, 1}));  // PEFT's shapes: [out, 1], feedforward [1, in]
  CHECK(l1.sizes() == torch::IntArrayRef({1, 5}));
  auto x = torch::randn({3, 6});
  auto plain = torch::linear(torch::linear(x, first->weight, first->bias), second->weight, second->bias);
  CHECK(torch::allclose(net->forward(x), plain, 1e-6, 1e-6));  // ones: unchanged
  for (const auto& item : net->named_parameters()) {
    INFO(item.key());
    CHECK(item.value().requires_grad() == item.key().ends_with("ia3_l"));
  }
  torch::NoGradGuard no_grad;
  l0.uniform_(0.5, 1.5);
  l1.uniform_(0.5, 1.5);
  const auto hidden = torch::linear(x, first->weight, first->bias) * l0.flatten();
  const auto expected = torch::linear(hidden * l1.flatten(), second->weight, second->bias);
  CHECK(torch::allclose(net->forward(x), expected, 1e-6, 1e-6));
  const auto w0 = first->weight.clone(), b0 = first->bias.clone(), w1 = second->weight.clone(), b1 = second->bias.clone();
  ia3.merge(*net);
  CHECK(torch::allclose(first->weight, w0 * l0, 1e-6, 1e-7));            // rows scaled
  CHECK(torch::allclose(first->bias, b0 * l0.flatten(), 1e-6, 1e-7));
  CHECK(torch::allclose(second->weight, w1 * l1, 1e-6, 1e-7));           // columns scaled
  CHECK(torch::equal(second->bias, b1));
  CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-6));
  ia3.unmerge(*net);
  CHECK(torch::allclose(first->weight, w0, 1e-6, 1e-7));
  CHECK(torch::allclose(second->weight, w1, 1e-6, 1e-7));
  CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-6));
}

TEST_CASE("IA3 under bf16 autocast returns the layer's dtype, as PEFT's does", "[peft][ia3]") {
  // PEFT: result = (base(x) * l).to(result.dtype); interm = (x.to(l.dtype) * l).to(x.dtype).
  TwoTargets two(52);
  auto& [net, ia3, first, second, l0, l1] = two;
  {
    torch::NoGradGuard no_grad;
    l0.uniform_(0.5, 1.5);
    l1.uniform_(0.5, 1.5);
  }
  const auto x = torch::randn({3, 6});
  ftopt::compat::AutocastScope scope(torch::kCPU, torch::kBFloat16, true);
  const auto hidden = first->forward(x);
  CHECK(hidden.scalar_type() == torch::kBFloat16);
  const auto base = torch::linear(x, first->weight, first->bias);  // bf16 under autocast
  CHECK(torch::equal(hidden, (base * l0.flatten()).to(torch::kBFloat16)));
  const auto y = net->forward(x);
  CHECK(y.scalar_type() == torch::kBFloat16);
  const auto want = torch::linear((hidden * l1.flatten()).to(torch::kBFloat16), second->weight, second->bias);
  peft::set_kernel(*net, {.merged_weight = false});  // PEFT's form
  CHECK(torch::equal(net->forward(x), want));
  peft::set_kernel(*net, {});
  // As one GEMM over W diag(l) (the next test): the same up to bf16's rounding.
  CHECK(torch::allclose(y.to(torch::kFloat), want.to(torch::kFloat), 2e-2, 2e-2));
  y.to(torch::kFloat).sum().backward();  // the vectors' gradients in their own dtype
  CHECK(l0.grad().scalar_type() == torch::kFloat);
  CHECK(l1.grad().scalar_type() == torch::kFloat);
}

TEST_CASE("IA3's feedforward target as one GEMM: PEFT's gradients, its output to the compute dtype's rounding",
          "[peft][ia3]") {
  // PEFT computes W ((x * l).to(x dtype)) + b; on a frozen layer ftopt computes x (W diag(l))^T + b
  // (peft's adapter kernel) and the gradients g = dy W, dx = g * l, dl = sum of g * x. Here
  // PEFT's form is written out on leaves of its own, in fp32 and under bf16 autocast, on a batch
  // of vectors and of token sequences.
  const bool autocast = GENERATE(false, true);
  const bool tokens = GENERATE(false, true);
  INFO("autocast " << autocast << ", tokens " << tokens);
  TwoTargets two(54);
  auto& second = *two.second;
  auto& l1 = two.l1;
  {
    torch::NoGradGuard no_grad;
    l1.uniform_(0.5, 1.5);
  }
  const auto dtype = autocast ? torch::kBFloat16 : torch::kFloat;
  const auto h = (tokens ? torch::randn({3, 7, 5}) : torch::randn({21, 5})).to(dtype).requires_grad_(true);
  const auto h_peft = h.detach().clone().requires_grad_(true);
  const auto l_peft = l1.detach().clone().requires_grad_(true);
  std::optional<ftopt::compat::AutocastScope> scope;
  if (autocast) scope.emplace(torch::kCPU, torch::kBFloat16, true);
  const auto y = second.forward(h);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name().find("AdapterLinearsFunction") != std::string::npos);  // the kernel ran
  const auto y_peft = torch::linear((h_peft.to(torch::kFloat) * l_peft).to(dtype), second.weight, second.bias);
  REQUIRE(y.scalar_type() == y_peft.scalar_type());
  // bf16 keeps 8 bits: W diag(l) rounded instead of x * l moves an output by a few of its ulps.
  const double tolerance = autocast ? 2e-2 : 1e-6;
  CHECK(torch::allclose(y.to(torch::kFloat), y_peft.to(torch::kFloat), tolerance, tolerance));
  const auto dy = torch::randn(y.sizes()).to(dtype);
  y.backward(dy);
  y_peft.backward(dy);
  CHECK(h.grad().scalar_type() == dtype);
  CHECK(l1.grad().scalar_type() == torch::kFloat);
  CHECK(torch::allclose(h.grad().to(torch::kFloat), h_peft.grad().to(torch::kFloat), 1e-6, 1e-6));
  CHECK(torch::allclose(l1.grad(), l_peft.grad(), 1e-6, 1e-6));
  CHECK_FALSE(second.weight.grad().defined());
  CHECK_FALSE(second.bias.grad().defined());
}

TEST_CASE("IA3 on the ViT: keys, values and the MLP's intermediate activations train", "[peft][ia3]") {
  auto model = test::tiny_vit(52);
  Ia3Trainer trainer(quiet({.epochs = 4}), {}, peft::Ia3({.targets = {"key", "value", mlp_output},
                                                           .feedforward = {mlp_output},
                                                           .modules_to_save = {"classifier"}}));
  const auto& trainable = trainer.prepare(model);
  // 2 layers x (key [16, 1], value [16, 1], MLP output [1, 32]) and the head (10x16 + 10).
  CHECK(trainable.size() == 2 * 3 + 2);
  const auto named = model->named_parameters();
  CHECK(named["vit.encoder.layer.1.attention.attention.key.ia3_l"].sizes() == torch::IntArrayRef({16, 1}));
  CHECK(named["vit.encoder.layer.0.output.dense.ia3_l"].sizes() == torch::IntArrayRef({1, 32}));
  CHECK_FALSE(named.contains("vit.encoder.layer.0.attention.output.dense.ia3_l"));
  torch::optim::AdamW optimizer(trainable, torch::optim::AdamWOptions(1e-2));
  const auto frozen = named["vit.encoder.layer.0.attention.attention.key.weight"].clone();
  torch::manual_seed(53);
  auto summary = trainer.fit(model, optimizer, test::Batches{{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32})}});
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  CHECK(torch::equal(named["vit.encoder.layer.0.attention.attention.key.weight"], frozen));
  CHECK_FALSE(torch::equal(named["vit.encoder.layer.0.output.dense.ia3_l"], torch::ones({1, 32})));
}

TEST_CASE("Ia3 names its mistakes", "[peft][ia3][errors]") {
  auto model = test::tiny_vit(56);
  Ia3Trainer stray(quiet(), {}, peft::Ia3({.targets = {"key"}, .feedforward = {"value"}}));
  CHECK_THAT(test::message_of([&] { stray.prepare(model); }),
             Catch::Contains("Ia3: feedforward pattern 'value' matches none of the targets"));
  for (const auto& p : model->parameters()) CHECK(p.requires_grad());  // refused before anything changed
  Ia3Trainer norms(quiet(), {}, peft::Ia3({.targets = {"layernorm_before"}}));
  CHECK_THAT(test::message_of([&] { norms.prepare(model); }), Catch::Contains("is not an ftopt::nn::Linear"));
  CHECK_THAT(test::message_of([] { Ia3Trainer(quiet(), {}, peft::Ia3({.targets = {}})); }),
             Catch::Contains("Ia3: targets is empty"));

  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"peft_type": "LORA", "target_modules": ["key"]})", "peft_type is 'LORA', not 'IA3'"},
      {R"({"peft_type": "IA3", "target_modules": ["key"], "fan_in_fan_out": true})",
       "fan_in_fan_out = true is not supported by ftopt's Ia3"},
      {R"({"peft_type": "IA3", "target_modules": ["key"], "init_ia3_weights": false})",
       "init_ia3_weights = false (random vectors) is not supported"},
      {R"({"peft_type": "IA3"})", "key 'target_modules' not found"},
      {R"({"peft_type": "IA3",)", "adapter_config.json: not valid JSON ("},
  };
  for (const auto& [text, message] : cases) {
    INFO(text);
    test::ScratchDir dir("ia3-bad-config");
    std::ofstream(dir.path / "adapter_config.json") << text;
    CHECK_THAT(test::message_of([&] { peft::ia3_config(dir.path); }),
               Catch::Contains("ia3_config: " + (dir.path / "adapter_config.json").string()) && Catch::Contains(message));
  }
}
