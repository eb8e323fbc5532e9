// Tests for include/ftopt/peft/files/vera.hpp: VeRA adapters save and load with PEFT's names and
// config, with and without the projections.
#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/peft/files/vera.hpp>

#include "../../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {

using VeraTrainer = Trainer<precision::Fp32, peft::Vera>;

} // namespace

TEST_CASE("VeRA adapters save and load with PEFT's names and config", "[peft][vera]") {
  for (bool save_projection : {true, false}) {
    INFO("save_projection " << save_projection);
    test::ScratchDir dir("vera-files");
    auto model = test::tiny_vit(64);
    const peft::VeraOptions settings{.r = 8, .targets = {"query", "value"}, .projection_prng_key = 5,
                                     .save_projection = save_projection, .modules_to_save = {"classifier"}};
    VeraTrainer trainer(quiet({.epochs = 2}), {}, settings);
    torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
    torch::manual_seed(65);
    trainer.fit(model, optimizer, test::Batches{{torch::randn({16, 1, 28, 28}), torch::randint(0, 10, {16})}});
    peft::save_adapter(*model, trainer.peft(), dir.path);
    auto file = weights::load_safetensors(dir.path / "adapter_model.safetensors");
    // 2 layers x 2 targets x (d, b), the head's weight and bias, and the projections when saved.
    CHECK(file.size() == 2 * 2 * 2 + 2 + (save_projection ? 2 : 0));
    CHECK(file.contains("base_model.model.vit.encoder.layer.0.attention.attention.query.vera_lambda_d"));
    CHECK(file.contains("base_model.vera_A") == save_projection);
    std::ifstream in(dir.path / "adapter_config.json");
    auto config = nlohmann::json::parse(in);
    CHECK(config["peft_type"] == "VERA");
    CHECK(config["r"] == 8);
    CHECK(config["projection_prng_key"] == 5);
    CHECK(config["save_projection"] == save_projection);

    const auto restored = peft::vera_config(dir.path);
    CHECK(restored.projection_prng_key == 5);
    auto fresh = test::tiny_vit(64);
    VeraTrainer other(quiet(), {}, restored);
    other.prepare(fresh);
    CHECK(peft::load_adapter(*fresh, dir.path).loaded == file.size());
    model->eval();
    fresh->eval();
    auto x = torch::randn({2, 1, 28, 28});
    CHECK(torch::allclose(fresh->forward(x), model->forward(x), 1e-6, 1e-6));
  }
}
