// Tests for include/ftopt/quant/static_int8.hpp on nn::Conv2d: quantized::conv2d as PyTorch
// defines it (the formula in conv_net.hpp), calibrated and converted.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/quant/files/int8.hpp>
#include <ftopt/quant/static_int8.hpp>
#include <ftopt/quant/support/report.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"
#include "conv_net.hpp"

using namespace ftopt;
using namespace ftopt::test::quant_conv;

TEST_CASE("StaticInt8 Conv2d: quantized::conv2d as PyTorch defines it", "[quant][static][conv]") {
  SECTION("one layer: the formula, to one output step") {
    torch::manual_seed(20);
    nn::Conv2d conv(torch::nn::Conv2dOptions(4, 6, 3).stride(2).padding(1).groups(2));
    Batches batches;
    for (int i = 0; i < 3; ++i) batches.emplace_back(torch::randn({4, 4, 9, 9}), torch::zeros({4}, torch::kLong));
    const auto x = batches[0].first;
    const auto expected = conv->forward(x).detach();
    quant::StaticInt8 policy;
    policy.calibrate(conv, batches);
    policy.convert(*conv);
    CHECK(policy.quantized() == std::vector<std::string>{""});
    auto kernel = std::dynamic_pointer_cast<quant::StaticInt8Conv2d>(conv->extension());
    REQUIRE(kernel);
    CHECK(kernel->qweight().qscheme() == torch::kPerChannelAffine);
    const auto got = conv->forward(x);
    CHECK(got.sizes() == expected.sizes());
    CHECK((got - conv_reference(*conv, *kernel, x)).abs().max().item<double>() <= kernel->output().scale * 1.001);
    CHECK(relative(got, expected) < 0.03);
  }

  SECTION("a network: convolutions and Linear in module order, close to float, saved and loaded") {
    torch::manual_seed(21);
    ConvNet model;
    model->eval();
    const auto batches = image_batches(4, 22);
    const auto x = batches[0].first;
    const auto expected = model->forward(x).detach();
    quant::StaticInt8 policy;
    policy.calibrate(model, batches);
    policy.convert(*model);
    CHECK(policy.quantized() == std::vector<std::string>{"conv1", "conv2", "head"});
    const auto got = model->forward(x).detach();
    CHECK(relative(got, expected) < 0.05);

    const auto errors = quant::layer_errors(model, batches);
    REQUIRE(errors.size() == 3);
    CHECK(errors[0].layer == "conv1");
    for (const auto& e : errors) CHECK((e.relative_error > 0 && e.relative_error < 0.05));

    test::ScratchDir dir("int8-conv");
    quant::save_int8(*model, dir.path / "conv.safetensors");
    ConvNet fresh;
    fresh->eval();
    const auto loaded = quant::load_int8(*fresh, dir.path / "conv.safetensors");
    CHECK(loaded.size() == 3);
    CHECK(std::dynamic_pointer_cast<quant::StaticInt8Conv2d>(fresh->conv2->extension()));
    CHECK(torch::equal(fresh->forward(x), got));
  }

  SECTION("keep_float leaves a convolution in float") {
    ConvNet model;
    quant::StaticInt8 policy({.keep_float = {"conv1"}});
    policy.calibrate(model, image_batches(1, 23));
    policy.convert(*model);
    CHECK(policy.quantized() == std::vector<std::string>{"conv2", "head"});
    CHECK(model->conv1->extension() == nullptr);
  }
}
