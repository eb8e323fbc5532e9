// Tests for include/ftopt/quant/qat.hpp on nn::Conv2d: trained fake-quantized, converted to int8
// convolutions (the formula in conv_net.hpp).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/quant/qat.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"
#include "conv_net.hpp"

using namespace ftopt;
using namespace ftopt::test::quant_conv;

TEST_CASE("Qat on Conv2d: trained fake-quantized, converted to int8 convolutions", "[quant][qat][conv]") {
  torch::manual_seed(24);
  ConvNet model;
  const auto batches = image_batches(2, 25);
  Trainer<precision::Fp32, peft::Full, memory::None, parallel::Single, quant::Qat> trainer(test::quiet());
  auto& params = trainer.prepare(model);
  REQUIRE(trainer.quant().layers().size() == 3);
  CHECK(trainer.quant().layers()[0].first == "conv1");
  torch::optim::Adam optimizer(params, 1e-2);
  const double first = trainer.train_step(model, optimizer, batches[0]).loss.item<double>();
  double last = first;
  for (int i = 0; i < 30; ++i) last = trainer.train_step(model, optimizer, batches[i % 2]).loss.item<double>();
  CHECK(last < 0.8 * first);

  // Straight-through: the input gradient of a fake-quantized convolution is zero where the
  // input lies outside the range its observer learned.
  model->eval();  // the observers do not move in eval
  auto x = batches[0].first.clone();
  x.index_put_({0, 0, 0, 0}, 100.0);
  x.requires_grad_(true);
  model->conv1->forward(x).sum().backward();
  CHECK(x.grad()[0][0][0][0].item<double>() == 0.0);
  CHECK(x.grad()[0][0][1][1].item<double>() != 0.0);

  const auto fake_quantized = model->forward(batches[0].first).detach();
  trainer.finalize(model);
  CHECK(std::dynamic_pointer_cast<quant::StaticInt8Conv2d>(model->conv1->extension()));
  CHECK(relative(model->forward(batches[0].first), fake_quantized) < 0.03);
}
