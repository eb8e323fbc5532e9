// Tests for include/ftopt/peft/vera.hpp against HF PEFT's VeRA semantics
// (peft/tuners/vera, PEFT 0.21: A [r, in_max] and B [out_max, r] shared and frozen, Kaiming-uniform
// with bound sqrt(6 / fan_in); per layer d [r] at d_initial and b [out] at zero;
// y = W x + bias + b * (B[:out] (d * (A[:, :in] x))); merge adds (b B[:out]) (d A[:, :in]) to W),
// written out here; tests/peer/vera.py checks the same against the real PEFT.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/peft/vera.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {
using VeraTrainer = Trainer<precision::Fp32, peft::Vera>;

/// The VeRA formula for one layer, written from the paper and PEFT's layer.py.
torch::Tensor vera_formula(const nn::LinearImpl& layer, const torch::Tensor& a, const torch::Tensor& b,
                           const torch::Tensor& d, const torch::Tensor& lambda_b, const torch::Tensor& x) {
  const auto in = layer.weight.size(1), out = layer.weight.size(0);
  const auto a_in = a.slice(1, 0, in), b_out = b.slice(0, 0, out);
  return torch::linear(x, layer.weight, layer.bias) + lambda_b * torch::matmul(torch::matmul(x, a_in.t()) * d, b_out.t());
}
} // namespace

TEST_CASE("VeRA shares one A and B across layers of two shapes and trains d and b", "[peft][vera]") {
  torch::manual_seed(61);
  torch::nn::Sequential net(nn::Linear(6, 5), nn::Linear(5, 8));
  peft::Vera vera({.r = 4, .targets = {"0", "1"}, .projection_prng_key = 3});
  vera.attach(*net);
  auto* first = net[0]->as<nn::LinearImpl>();
  auto* second = net[1]->as<nn::LinearImpl>();
  const auto& shared = vera.projections();
  // The largest input (6) and output (8) among the targets; bounds sqrt(6 / fan_in).
  CHECK(shared.a.sizes() == torch::IntArrayRef({4, 6}));
  CHECK(shared.b.sizes() == torch::IntArrayRef({8, 4}));
  CHECK(shared.a.abs().max().item<double>() <= std::sqrt(6.0 / 6));
  CHECK(shared.b.abs().max().item<double>() <= std::sqrt(6.0 / 4));
  CHECK(shared.b.abs().max().item<double>() > std::sqrt(6.0 / 6));  // drawn with B's own bound, not A's
  CHECK(net->named_buffers()["vera_A"].is_same(shared.a));
  CHECK_FALSE(shared.a.requires_grad());
  for (const auto& item : net->named_parameters()) {
    INFO(item.key());
    CHECK(item.value().requires_grad() == (item.key().find("vera_lambda") != std::string::npos));
  }
  const auto& [name0, branch0] = vera.branches()[0];
  const auto& [name1, branch1] = vera.branches()[1];
  CHECK(torch::equal(branch0->lambda_d(), torch::full({4}, 0.1)));  // PEFT's d_initial
  CHECK(torch::equal(branch1->lambda_b(), torch::zeros({8})));
  auto x = torch::randn({3, 6});
  const auto plain = torch::linear(torch::linear(x, first->weight, first->bias), second->weight, second->bias);
  CHECK(torch::allclose(net->forward(x), plain, 1e-6, 1e-6));  // b = 0: unchanged
  {
    torch::NoGradGuard no_grad;
    for (const auto& [name, branch] : vera.branches()) {
      branch->lambda_d().uniform_(-1, 1);
      branch->lambda_b().uniform_(-1, 1);
    }
  }
  auto formula = [&](const torch::Tensor& input) {
    const auto hidden = vera_formula(*first, shared.a, shared.b, branch0->lambda_d(), branch0->lambda_b(), input);
    return vera_formula(*second, shared.a, shared.b, branch1->lambda_d(), branch1->lambda_b(), hidden);
  };
  // The layer-by-layer branch and the low-rank GEMM give the formula's outputs and gradients.
  std::vector<std::vector<torch::Tensor>> runs;
  for (bool low_rank : {false, true}) {
    peft::set_kernel(*net, {.merged_weight = low_rank});
    INFO("low-rank GEMM " << low_rank);
    for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
    auto input = x.clone().requires_grad_(true);
    const auto y = net->forward(input);
    CHECK(torch::allclose(y, formula(x), 1e-5, 1e-6));
    runs.push_back(test::outputs_and_gradients({y}, input, *net));
  }
  for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
  auto input = x.clone().requires_grad_(true);
  std::vector<torch::Tensor> params;
  for (const auto& [name, branch] : vera.branches()) params.insert(params.end(), {branch->lambda_d(), branch->lambda_b()});
  auto expected = test::outputs_and_gradients({formula(input)}, input, *net);
  REQUIRE(runs[0].size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i)
    for (const auto& run : runs) CHECK(torch::allclose(run[i], expected[i], 1e-5, 1e-6));

  const auto w0 = first->weight.clone(), w1 = second->weight.clone();
  torch::NoGradGuard no_grad;
  const auto y = formula(x);
  vera.merge(*net);
  const auto delta0 = torch::matmul(branch0->lambda_b().unsqueeze(1) * shared.b.slice(0, 0, 5),
                                    branch0->lambda_d().unsqueeze(1) * shared.a.slice(1, 0, 6));
  CHECK(torch::allclose(first->weight, w0 + delta0, 1e-6, 1e-6));
  CHECK(torch::allclose(net->forward(x), y, 1e-5, 1e-6));
  vera.unmerge(*net);
  CHECK(torch::allclose(first->weight, w0, 1e-6, 1e-6));
  CHECK(torch::allclose(second->weight, w1, 1e-6, 1e-6));
  CHECK(torch::allclose(net->forward(x), y, 1e-5, 1e-6));
}

TEST_CASE("VeRA's projections depend on projection_prng_key alone", "[peft][vera]") {
  auto draw = [](std::uint64_t key) {
    torch::manual_seed(static_cast<std::uint64_t>(key) + 100);  // the global seed must not matter
    torch::nn::Sequential net(nn::Linear(6, 5));
    peft::Vera vera({.r = 3, .targets = {"0"}, .projection_prng_key = key});
    vera.attach(*net);
    return std::pair{vera.projections().a.clone(), vera.projections().b.clone()};
  };
  const auto [a7, b7] = draw(7);
  const auto [again_a, again_b] = draw(7);
  const auto [a8, b8] = draw(8);
  CHECK(torch::equal(a7, again_a));
  CHECK(torch::equal(b7, again_b));
  CHECK_FALSE(torch::equal(a7, a8));
  // A then B from one generator: B is the generator's next draws, not a fresh seed's first ones.
  auto generator = at::detail::createCPUGenerator(7);
  auto first = torch::empty({3, 6}).uniform_(-1, 1, generator);
  auto next = torch::empty({5, 3}).uniform_(-1, 1, generator);
  const double bound_a = std::sqrt(6.0 / 6), bound_b = std::sqrt(6.0 / 3);
  CHECK(torch::allclose(a7, first * bound_a, 0, 1e-6));
  CHECK(torch::allclose(b7, next * bound_b, 0, 1e-6));
}

TEST_CASE("VeRA on the ViT: the vectors train, the base and the projections stay", "[peft][vera]") {
  auto model = test::tiny_vit(62);
  VeraTrainer trainer(quiet({.epochs = 4}), {},
                      peft::Vera({.r = 8, .targets = {"query", "value", "intermediate.dense"},
                                  .modules_to_save = {"classifier"}}));
  const auto& trainable = trainer.prepare(model);
  // 2 layers x (query, value: d 8 + b 16; intermediate: d 8 + b 32) and the head (10x16 + 10).
  std::int64_t count = 0;
  for (const auto& p : trainable) count += p.numel();
  CHECK(count == 2 * ((8 + 16) * 2 + (8 + 32)) + 10 * 16 + 10);
  const auto buffers = model->named_buffers();
  CHECK(buffers["vera_A"].sizes() == torch::IntArrayRef({8, 16}));   // in_max 16
  CHECK(buffers["vera_B"].sizes() == torch::IntArrayRef({32, 8}));   // out_max 32 (the MLP)
  const auto a = buffers["vera_A"].clone();
  const auto named = model->named_parameters();
  const auto frozen = named["vit.encoder.layer.0.attention.attention.query.weight"].clone();
  torch::optim::AdamW optimizer(trainable, torch::optim::AdamWOptions(1e-2));
  torch::manual_seed(63);
  auto summary = trainer.fit(model, optimizer, test::Batches{{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32})}});
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  CHECK(torch::equal(named["vit.encoder.layer.0.attention.attention.query.weight"], frozen));
  CHECK(torch::equal(model->named_buffers()["vera_A"], a));
  CHECK(named["vit.encoder.layer.1.attention.attention.value.vera_lambda_b"].abs().sum().item<double>() > 0);
}

TEST_CASE("Vera names its mistakes", "[peft][vera][errors]") {
  auto model = test::tiny_vit(66);
  CHECK_THAT(test::message_of([] { VeraTrainer(quiet(), {}, peft::Vera({.r = 0})); }),
             Catch::Contains("Vera: r must be > 0, got 0"));
  CHECK_THAT(test::message_of([] { VeraTrainer(quiet(), {}, peft::Vera({.dropout = 1})); }),
             Catch::Contains("Vera: dropout must be in [0, 1), got 1"));
  VeraTrainer norms(quiet(), {}, peft::Vera({.targets = {"layernorm_before"}}));
  CHECK_THAT(test::message_of([&] { norms.prepare(model); }),
             Catch::Contains("Vera: target 'vit.encoder.layer.0.layernorm_before' is not an ftopt::nn::Linear"));
  for (const auto& p : model->parameters()) CHECK(p.requires_grad());  // refused before anything changed
  CHECK_THAT(test::message_of([&] { peft::save_adapter(*model, peft::Vera(), "unused"); }),
             Catch::Contains("save_adapter: Vera is not attached to a model yet"));

  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"peft_type": "IA3", "target_modules": ["key"]})", "peft_type is 'IA3', not 'VERA'"},
      {R"({"peft_type": "VERA", "r": 4, "target_modules": ["key"], "bias": "all"})",
       "bias = 'all' is not supported; ftopt's Vera trains no biases"},
      {R"({"peft_type": "VERA", "r": 4, "target_modules": ["key"], "init_weights": false})",
       "init_weights = false (random vectors) is not supported"},
      {R"({"peft_type": "VERA", "r": 4, "target_modules": ["key"], "layers_to_transform": [0]})",
       "layers_to_transform = [0] is not supported by ftopt's Vera"},
      {R"({"peft_type": "VERA", "r": -2, "target_modules": ["key"]})", "Vera: r must be > 0, got -2"},
      {R"({"peft_type": "VERA", "target_modules": ["key"]})", "key 'r' not found"},
  };
  for (const auto& [text, message] : cases) {
    INFO(text);
    test::ScratchDir dir("vera-bad-config");
    std::ofstream(dir.path / "adapter_config.json") << text;
    CHECK_THAT(test::message_of([&] { peft::vera_config(dir.path); }),
               Catch::Contains("vera_config: " + (dir.path / "adapter_config.json").string()) && Catch::Contains(message));
  }
  // A config whose targets the model lacks names the entry and the file.
  test::ScratchDir dir("vera-stray-target");
  std::ofstream(dir.path / "adapter_config.json") << R"({"peft_type": "VERA", "r": 4, "target_modules": ["q_proj"]})";
  CHECK_THAT(test::message_of([&] { peft::vera_config(dir.path, *model, peft::AdapterNames{}); }),
             Catch::Contains("target_modules entry 'q_proj' matches no module of the model"));
}
