// Tests for include/ftopt/quant/files/int8.hpp: save_int8 / load_int8 give the same outputs from a
// file a quarter the size, and keep a static model's activation parameters.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/quant/dynamic_int8.hpp>
#include <ftopt/quant/files/int8.hpp>
#include <ftopt/quant/static_int8.hpp>
#include <ftopt/trainer.hpp>

#include "../../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using ftopt::test::ScratchDir;

TEST_CASE("save_int8 / load_int8: the same outputs from a file a quarter the size", "[quant][int8][files]") {
  ScratchDir dir("int8");
  torch::manual_seed(6);
  models::Mlp model({.in = 64, .hidden = {128}, .out = 10});
  auto x = torch::randn({8, 64});
  weights::save(*model, dir.path / "float.safetensors");
  quant::DynamicInt8 policy({.granularity = quant::Granularity::PerChannel});
  policy.convert(*model);
  const auto converted = model->forward(x).detach();
  quant::save_int8(*model, dir.path / "int8.safetensors");
  const auto float_bytes = std::filesystem::file_size(dir.path / "float.safetensors");
  const auto int8_bytes = std::filesystem::file_size(dir.path / "int8.safetensors");
  CHECK(int8_bytes < float_bytes / 3);

  torch::manual_seed(99);  // other float weights: the file must replace them all
  models::Mlp fresh({.in = 64, .hidden = {128}, .out = 10});
  const auto layers = quant::load_int8(*fresh, dir.path / "int8.safetensors");
  CHECK(layers == std::vector<std::string>{"layers.0", "layers.2"});
  CHECK(torch::equal(fresh->forward(x), converted));

  SECTION("a model of another shape is refused by name, untouched") {
    models::Mlp other({.in = 64, .hidden = {64}, .out = 10});
    const auto before = test::snapshot(*other);
    CHECK_THAT(test::message_of([&] { quant::load_int8(*other, dir.path / "int8.safetensors"); }),
               Contains("'layers.0'.weight has shape [128, 64], the model's layer [64, 64]"));
    CHECK(test::same_values(before, test::snapshot(*other)));
  }
}

// ---- Observers and StaticInt8 (torch/ao/quantization/observer.py, _calculate_qparams) ----

TEST_CASE("save_int8 / load_int8 keep a static model's activation parameters", "[quant][static][files]") {
  ScratchDir dir("int8-static");
  torch::manual_seed(12);
  models::Mlp model({.in = 32, .hidden = {64}, .out = 10});
  model->eval();
  auto x = torch::randn({64, 32});
  std::vector<std::pair<torch::Tensor, torch::Tensor>> calibration{{x, torch::zeros({64}, torch::kLong)}};
  quant::StaticInt8 policy;
  policy.calibrate(model, calibration);
  policy.convert(*model);
  const auto converted = model->forward(x).detach();
  quant::save_int8(*model, dir.path / "static.safetensors");
  models::Mlp fresh({.in = 32, .hidden = {64}, .out = 10});
  fresh->eval();
  quant::load_int8(*fresh, dir.path / "static.safetensors");
  auto modules = fresh->named_modules("", false);
  CHECK(std::dynamic_pointer_cast<quant::StaticInt8Linear>(modules["layers.0"]->as<ftopt::nn::LinearImpl>()->extension()));
  CHECK(torch::equal(fresh->forward(x), converted));
}
