// Tests for include/ftopt/peft/lora.hpp and peft/files/lora.hpp, against HF PEFT's LoRA semantics
// (peft/tuners/lora/layer.py: y = W x + b + scaling * B(A(dropout(x))), scaling = alpha / r or
// alpha / sqrt(r) with use_rslora; A Kaiming-uniform a = sqrt(5), B zeros; merge W += scaling B A).
#include <catch2/catch.hpp>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/peft/files/lora.hpp>

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

TEST_CASE("Adapters save and load with PEFT's names and config", "[peft][lora]") {
  const auto dir = std::filesystem::temp_directory_path() / ("ftopt-lora-" + std::to_string(::getpid()));
  auto model = test::tiny_vit(6);
  peft::LoraOptions settings{.r = 4, .alpha = 16, .dropout = 0.1, .targets = {"query", "value"}, .modules_to_save = {"classifier"}};
  LoraTrainer trainer({.epochs = 2, .device = torch::kCPU, .report_hardware = false}, {}, settings);
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
  torch::manual_seed(7);
  trainer.fit(model, optimizer, test::Batches{{torch::randn({16, 1, 28, 28}), torch::randint(0, 10, {16})}});
  peft::save_adapter(*model, trainer.peft(), dir);

  auto file = weights::load_safetensors(dir / "adapter_model.safetensors");
  CHECK(file.size() == 10);  // 8 LoRA matrices + classifier weight and bias
  CHECK(file.contains("base_model.model.vit.encoder.layer.1.attention.attention.value.lora_A.weight"));
  std::ifstream in(dir / "adapter_config.json");
  auto config = nlohmann::json::parse(in);
  CHECK(config["peft_type"] == "LORA");
  CHECK(config["r"] == 4);
  CHECK(config["lora_alpha"] == 16.0);
  CHECK(config["target_modules"] == nlohmann::json({"query", "value"}));
  CHECK(config["bias"] == "none");

  auto restored_settings = peft::lora_config(dir);
  CHECK(restored_settings.r == 4);
  CHECK(restored_settings.alpha == 16);
  auto fresh = test::tiny_vit(6);  // the same base weights, as a user's pretrained model would be
  LoraTrainer other(quiet(), {}, restored_settings);
  other.prepare(fresh);
  auto report = peft::load_adapter(*fresh, dir);
  CHECK(report.loaded == 10);
  model->eval();
  fresh->eval();
  auto x = torch::randn({2, 1, 28, 28});
  CHECK(torch::allclose(fresh->forward(x), model->forward(x)));

  auto bare = test::tiny_vit(6);  // no Lora attached: the adapter's tensors have no place
  CHECK_THAT(test::message_of([&] { peft::load_adapter(*bare, dir); }),
             Catch::Contains("have no place in the model (is the same Lora attached?)"));
  std::filesystem::remove_all(dir);
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

TEST_CASE("AdapterNames map ftopt's ViT names to the ones transformers 5 and PEFT use", "[peft][lora]") {
  // Expected names written out from transformers 5's ViT (vit.layers.N.attention.q_proj, ...,
  // mlp.fc1/fc2) and PEFT's LoraLayer (the adapted Linear's own tensors under base_layer);
  // peer.lora checks the same table against the live libraries.
  auto model = test::tiny_vit(6);
  peft::Lora lora({.r = 2, .alpha = 4, .targets = {"query", "value"}});
  lora.attach(*model);
  const auto names = peft::transformers_vit_names();
  std::map<std::string, std::string> peft_key;
  for (const auto& [own, theirs] : peft::peft_keys(*model, names)) peft_key[own] = theirs;
  CHECK(peft_key.at("vit.encoder.layer.0.attention.attention.query.lora_A.weight") ==
        "vit.layers.0.attention.q_proj.lora_A.weight");
  CHECK(peft_key.at("vit.encoder.layer.1.attention.attention.value.bias") == "vit.layers.1.attention.v_proj.base_layer.bias");
  CHECK(peft_key.at("vit.encoder.layer.1.attention.attention.key.weight") == "vit.layers.1.attention.k_proj.weight");
  CHECK(peft_key.at("vit.encoder.layer.0.attention.output.dense.weight") == "vit.layers.0.attention.o_proj.weight");
  CHECK(peft_key.at("vit.encoder.layer.0.intermediate.dense.weight") == "vit.layers.0.mlp.fc1.weight");
  CHECK(peft_key.at("vit.encoder.layer.0.output.dense.weight") == "vit.layers.0.mlp.fc2.weight");
  CHECK(peft_key.at("classifier.weight") == "classifier.weight");
  // No rules: the names stay, only PEFT's base_layer is added.
  CHECK(peft::peft_keys(*model, {}).front().first == peft::peft_keys(*model, {}).front().second);

  auto texts = [](const nn::NamePatterns& patterns) {
    std::vector<std::string> out;
    for (const auto& p : patterns) out.push_back(p.text);
    return out;
  };
  const auto to_peft = peft::patterns_to_peft(*model, {"query", "value"}, names);
  CHECK(texts(to_peft) == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(texts(peft::patterns_from_peft(*model, to_peft, names)) == std::vector<std::string>{"query", "value"});
  CHECK_THAT(test::message_of([] { peft::AdapterNames{{{"(unclosed", "x"}}}.module("a.b"); }),
             Catch::Contains("AdapterNames: '(unclosed' is not a valid regular expression"));
}
