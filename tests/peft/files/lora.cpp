// Tests for include/ftopt/peft/files/lora.hpp: LoRA, DoRA and PiSSA adapters save and load with
// PEFT's names and adapter_config.json fields.
#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/peft/files/lora.hpp>

#include "../../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {

using LoraTrainer = Trainer<precision::Fp32, peft::Lora>;

} // namespace

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
             Catch::Contains("have no place in the model (is the same adapter attached?)"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("DoRA and PiSSA adapters save and load with PEFT's fields", "[peft][lora][dora]") {
  test::ScratchDir dir("lora-dora-pissa");
  auto model = test::tiny_vit(45);
  const peft::LoraOptions settings{.r = 4, .alpha = 8, .targets = {"query", "value"}, .dora = true,
                                   .init = peft::LoraInit::Pissa};
  LoraTrainer trainer(quiet({.epochs = 2}), {}, settings);
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
  torch::manual_seed(46);
  trainer.fit(model, optimizer, test::Batches{{torch::randn({16, 1, 28, 28}), torch::randint(0, 10, {16})}});
  peft::save_adapter(*model, trainer.peft(), dir.path);

  auto file = weights::load_safetensors(dir.path / "adapter_model.safetensors");
  CHECK(file.size() == 12);  // A, B and the magnitude of 4 layers
  CHECK(file.contains("base_model.model.vit.encoder.layer.0.attention.attention.query.lora_magnitude_vector"));
  std::ifstream in(dir.path / "adapter_config.json");
  auto config = nlohmann::json::parse(in);
  CHECK(config["use_dora"] == true);
  CHECK(config["init_lora_weights"] == "pissa");

  const auto restored = peft::lora_config(dir.path);
  CHECK(restored.dora);
  CHECK(restored.init == peft::LoraInit::Pissa);
  auto fresh = test::tiny_vit(45);  // the original base: attaching factors it again
  LoraTrainer other(quiet(), {}, restored);
  other.prepare(fresh);
  CHECK(peft::load_adapter(*fresh, dir.path).loaded == 12);
  model->eval();
  fresh->eval();
  auto x = torch::randn({2, 1, 28, 28});
  CHECK(torch::allclose(fresh->forward(x), model->forward(x), 1e-5, 1e-6));
}
