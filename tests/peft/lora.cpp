// Tests for include/ftopt/peft/lora.hpp against HF PEFT's LoRA semantics
// (peft/tuners/lora/layer.py: y = W x + b + scaling * B(A(dropout(x))), scaling = alpha / r or
// alpha / sqrt(r) with use_rslora; A Kaiming-uniform a = sqrt(5), B zeros; merge W += scaling B A).
#include <catch2/catch.hpp>

#include <fstream>
#include <map>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/peft/lora.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {
using LoraTrainer = Trainer<precision::Fp32, peft::Lora>;
} // namespace

TEST_CASE("Lora adapts the seeds' targets and nothing else trains", "[peft][lora]") {
  auto model = test::tiny_vit(1);
  model->eval();
  auto x = torch::randn({3, 1, 28, 28});
  auto before = model->forward(x).detach();
  LoraTrainer trainer(quiet(), {}, peft::Lora({.r = 4, .alpha = 8, .targets = {"query", "value"}}));
  const auto& trainable = trainer.prepare(model);
  CHECK(trainable.size() == 8);  // 2 layers x {query, value} x {lora_A, lora_B}
  auto names = weights::state_dict(*model).keys();
  CHECK(std::count(names.begin(), names.end(), "vit.encoder.layer.0.attention.attention.query.lora_A.weight") == 1);
  CHECK(std::count(names.begin(), names.end(), "vit.encoder.layer.1.attention.attention.value.lora_B.weight") == 1);
  for (const auto& item : model->named_parameters()) {
    INFO(item.key());
    CHECK(item.value().requires_grad() == (item.key().find(".lora_") != std::string::npos));
  }
  CHECK(torch::equal(model->forward(x), before));  // B = 0: unchanged at step 0
  auto& branch = *trainer.peft().branches().front().second;
  CHECK(torch::equal(branch.b()->weight, torch::zeros({16, 4})));
  const double bound = 1.0 / std::sqrt(16.0);  // kaiming_uniform(a = sqrt 5): 1 / sqrt(fan_in)
  CHECK(branch.a()->weight.abs().max().item<double>() <= bound);
}

TEST_CASE("The LoRA forward is W x + b + (alpha / r) B A x, merge and unmerge", "[peft][lora]") {
  for (bool rslora : {false, true}) {
    INFO("rslora " << rslora);
    torch::manual_seed(2);
    torch::nn::Sequential net(nn::Linear(6, 5));
    peft::Lora lora({.r = 2, .alpha = 6, .targets = {"0"}, .rslora = rslora});
    lora.attach(*net);
    auto& branch = *lora.branches().front().second;
    torch::NoGradGuard no_grad;
    branch.b()->weight.normal_();
    auto* layer = net[0]->as<nn::LinearImpl>();
    auto x = torch::randn({4, 6});
    const double scaling = rslora ? 6 / std::sqrt(2.0) : 3.0;
    auto expected = torch::linear(x, layer->weight, layer->bias) +
                    scaling * torch::matmul(torch::matmul(x, branch.a()->weight.t()), branch.b()->weight.t());
    CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-6));
    auto w = layer->weight.clone();
    lora.merge(*net);
    CHECK(torch::allclose(layer->weight, w + scaling * torch::matmul(branch.b()->weight, branch.a()->weight)));
    CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-5));
    lora.unmerge(*net);
    CHECK(torch::allclose(layer->weight, w, 1e-6, 1e-6));
    CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-5));
  }
}

TEST_CASE("Lora's bias and modules_to_save settings", "[peft][lora]") {
  SECTION("bias all, head kept trainable") {
    auto model = test::tiny_vit(3);
    LoraTrainer trainer(quiet(), {}, peft::Lora({.targets = {"query"}, .bias = peft::LoraBias::All, .modules_to_save = {"classifier"}}));
    trainer.prepare(model);
    for (const auto& item : model->named_parameters()) {
      INFO(item.key());
      const bool expected = item.key().find(".lora_") != std::string::npos || item.key().ends_with("bias") ||
                            item.key().rfind("classifier.", 0) == 0;
      CHECK(item.value().requires_grad() == expected);
    }
  }
  SECTION("bias lora_only") {
    auto model = test::tiny_vit(3);
    LoraTrainer trainer(quiet(), {}, peft::Lora({.targets = {"query"}, .bias = peft::LoraBias::LoraOnly}));
    trainer.prepare(model);
    CHECK(model->named_parameters()["vit.encoder.layer.0.attention.attention.query.bias"].requires_grad());
    CHECK_FALSE(model->named_parameters()["vit.encoder.layer.0.attention.attention.key.bias"].requires_grad());
  }
}

TEST_CASE("Training with Lora moves only the adapters", "[peft][lora]") {
  auto model = test::tiny_vit(4);
  LoraTrainer trainer({.epochs = 5, .device = torch::kCPU, .report_hardware = false}, {},
                      peft::Lora({.r = 4, .alpha = 8, .targets = {"query", "value", "dense"}, .modules_to_save = {"classifier"}}));
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
  auto frozen_before = model->named_parameters()["vit.encoder.layer.0.attention.attention.query.weight"].clone();
  torch::manual_seed(5);
  test::Batches batches{{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32})}};
  auto summary = trainer.fit(model, optimizer, batches);
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  CHECK(torch::equal(model->named_parameters()["vit.encoder.layer.0.attention.attention.query.weight"], frozen_before));
}

TEST_CASE("Lora names its mistakes", "[peft][lora][errors]") {
  CHECK_THAT(test::message_of([] { LoraTrainer(quiet(), {}, peft::Lora({.r = 0})); }), Catch::Contains("Lora: r must be > 0, got 0"));
  CHECK_THAT(test::message_of([] { LoraTrainer(quiet(), {}, peft::Lora({.dropout = 1.5})); }),
             Catch::Contains("dropout must be in [0, 1), got 1.5"));
  auto model = test::tiny_vit(8);
  LoraTrainer trainer(quiet(), {}, peft::Lora({.targets = {"qeury"}}));
  CHECK_THAT(test::message_of([&] { trainer.prepare(model); }),
             Catch::Contains("targets 'qeury' match no module; module names here:") && Catch::Contains("query"));
  LoraTrainer norms(quiet(), {}, peft::Lora({.targets = {"layernorm_before"}}));
  CHECK_THAT(test::message_of([&] { norms.prepare(model); }), Catch::Contains("is not an ftopt::nn::Linear"));

  // A config whose bias is not one of PEFT's three names is refused, naming the file and value.
  test::ScratchDir dir("lora-bad-bias");
  std::ofstream(dir.path / "adapter_config.json")
      << R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["query"], "bias": "everything"})";
  CHECK_THAT(test::message_of([&] { peft::lora_config(dir.path); }),
             Catch::Contains("adapter_config.json: bias must be none, all or lora_only, got 'everything'"));
}

TEST_CASE("Lora under Bf16Mixed, with a kept head, and PEFT's trainable report", "[peft][lora][bf16]") {
  auto model = test::tiny_vit(9);
  Trainer<precision::Bf16Mixed, peft::Lora> trainer(
      test::quiet({.epochs = 4}), {}, peft::Lora({.r = 4, .alpha = 8, .targets = {"query", "value"}, .modules_to_save = {"classifier"}}));
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
  // PEFT's print_trainable_parameters format: 8 LoRA matrices of 4x16 (512) and the 10x16 + 10
  // head make 682 trainable of 6,250 (the ViT's 5,568 plus the adapters); 682 / 6250 = 10.912%.
  CHECK(peft::trainable_report(*model) == "trainable params: 682 || all params: 6,250 || trainable%: 10.9120");
  torch::manual_seed(10);
  auto summary = trainer.fit(model, optimizer, test::Batches{{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32})}});
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  for (auto& p : trainer.trainable_parameters()) CHECK(p.scalar_type() == torch::kFloat);
}

TEST_CASE("Lora's variants name their mistakes", "[peft][lora][errors]") {
  auto model = test::tiny_vit(47);
  LoraTrainer wide(quiet(), {}, peft::Lora({.r = 32}));
  CHECK_THAT(test::message_of([&] { wide.prepare(model); }),
             Catch::Contains("Lora: r = 32 is larger than layer 'vit.encoder.layer.0.attention.attention.query' "
                             "allows (16 x 16); choose r <= 16"));
  CHECK_THAT(test::message_of([] { LoraTrainer(quiet(), {}, peft::Lora({.loraplus_lr_ratio = 0.5})); }),
             Catch::Contains("loraplus_lr_ratio must be 0 (off) or >= 1 (B's lr over A's), got 0.5"));

  // A config asking for what ftopt's Lora does not do is refused, naming the file, field and value.
  const std::string head = R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["query"], )";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("use_qalora": true})", "use_qalora = true is not supported by ftopt's Lora"},
      {R"("rank_pattern": {"query": 8}})", R"(rank_pattern = {"query":8} is not supported by ftopt's Lora)"},
      {R"("init_lora_weights": "loftq"})", R"(init_lora_weights = "loftq" is not supported; ftopt's Lora knows true, "gaussian", "pissa" and "olora")"},
  };
  {
    // A target the model lacks is named with the file, before anything is attached.
    test::ScratchDir dir("lora-missing-module");
    std::ofstream(dir.path / "adapter_config.json") << R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["qeury"]})";
    CHECK_THAT(test::message_of([&] { peft::lora_config(dir.path, *model, {}); }),
               Catch::Contains((dir.path / "adapter_config.json").string() +
                               ": target_modules entry 'qeury' matches no module of the model; module names here:"));
  }
  for (const auto& [tail, message] : cases) {
    test::ScratchDir dir("lora-unsupported");
    std::ofstream(dir.path / "adapter_config.json") << head << tail;
    INFO(tail);
    CHECK_THAT(test::message_of([&] { peft::lora_config(dir.path); }),
               Catch::Contains((dir.path / "adapter_config.json").string()) && Catch::Contains(message));
  }
}
