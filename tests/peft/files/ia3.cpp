// Tests for include/ftopt/peft/files/ia3.hpp: IA3 adapters save and load with PEFT's names and
// config.
#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/peft/files/ia3.hpp>

#include "../../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {

using Ia3Trainer = Trainer<precision::Fp32, peft::Ia3>;

} // namespace

TEST_CASE("IA3 adapters save and load with PEFT's names and config", "[peft][ia3]") {
  test::ScratchDir dir("ia3-files");
  auto model = test::tiny_vit(54);
  const nn::NamePattern mlp_output = nn::regex(R"((.*\.)?layer\.\d+\.output\.dense)");
  const peft::Ia3Options settings{.targets = {"key", "value", mlp_output}, .feedforward = {mlp_output},
                                  .modules_to_save = {"classifier"}};
  Ia3Trainer trainer(quiet({.epochs = 2}), {}, settings);
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
  torch::manual_seed(55);
  trainer.fit(model, optimizer, test::Batches{{torch::randn({16, 1, 28, 28}), torch::randint(0, 10, {16})}});
  peft::save_adapter(*model, trainer.peft(), dir.path);
  auto file = weights::load_safetensors(dir.path / "adapter_model.safetensors");
  CHECK(file.size() == 8);
  CHECK(file.contains("base_model.model.vit.encoder.layer.0.output.dense.ia3_l"));
  std::ifstream in(dir.path / "adapter_config.json");
  auto config = nlohmann::json::parse(in);
  CHECK(config["peft_type"] == "IA3");
  CHECK(config["feedforward_modules"] == mlp_output.text);
  // Names mixed with a regex: one regex, each name as PEFT matches it (whole name or dotted suffix).
  CHECK(config["target_modules"] ==
        R"(((.*\.)?key)|((.*\.)?value)|()" + mlp_output.text + ")");

  const auto restored = peft::ia3_config(dir.path);
  REQUIRE(restored.feedforward.size() == 1);
  CHECK(restored.feedforward.front().is_regex());
  auto fresh = test::tiny_vit(54);
  Ia3Trainer other(quiet(), {}, restored);
  other.prepare(fresh);
  CHECK(peft::load_adapter(*fresh, dir.path).loaded == 8);
  CHECK(other.peft().scalings().size() == 6);
  model->eval();
  fresh->eval();
  auto x = torch::randn({2, 1, 28, 28});
  CHECK(torch::allclose(fresh->forward(x), model->forward(x), 1e-6, 1e-6));
}
