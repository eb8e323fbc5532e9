// Tests for include/ftopt/quant/none.hpp: the baseline leaves the model in floating point and adds
// no work: prepare and convert attach nothing to ftopt's layers and change no weight, so the
// outputs stay bit for bit those of the float model.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"
#include "conv_net.hpp"

using namespace ftopt;

TEST_CASE("quant::None: nothing attached, no weight changed, the float outputs", "[quant]") {
  STATIC_REQUIRE(quant::Policy<quant::None>);
  STATIC_REQUIRE(PolicyOf<quant::None, axis::Quant>);
  STATIC_REQUIRE_FALSE(rules::trains_fake_quantized<quant::None>);
  test::quant_conv::ConvNet model;  // two nn::Conv2d and an nn::Linear
  model->eval();
  const auto x = test::quant_conv::image_batches(1, 13).front().first;
  const auto before = test::snapshot(*model);
  const auto float_out = model->forward(x).detach();

  quant::None none;
  none.prepare(*model);
  none.convert(*model);
  CHECK(model->conv1->extension() == nullptr);
  CHECK(model->conv2->extension() == nullptr);
  CHECK(model->head->extension() == nullptr);
  CHECK(test::same_values(test::snapshot(*model), before));
  for (const auto& p : model->parameters()) CHECK(p.scalar_type() == torch::kFloat);
  CHECK(torch::equal(model->forward(x), float_out));
}
