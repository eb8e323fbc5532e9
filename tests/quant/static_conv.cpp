// Static int8 convolutions (quant::StaticInt8 and quant::Qat on nn::Conv2d) against what
// torch.ao.quantization's static Conv2d computes (torch/ao/nn/quantized/modules/conv.py calls
// quantized::conv2d): the input quantized to quint8 with the calibrated scale and zero point,
// the qint8 weight (symmetric, per output channel) convolved with it in integers, the int32
// accumulator plus the bias requantized once to the output's quint8 scale and zero point.
// In float terms: quant(conv2d(dequant(quant(x)), dequant(W), b), out_scale, out_zero_point),
// to within one output step (the kernel's single rounding).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/quant/files/int8.hpp>
#include <ftopt/quant/qat.hpp>
#include <ftopt/quant/support/report.hpp>
#include <ftopt/quant/static_int8.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace quant_conv_test {

/// Two convolutions (the second strided and grouped) and a Linear head, on 3x8x8 images.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl() {
    conv1 = register_module("conv1", nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    conv2 = register_module("conv2", nn::Conv2d(torch::nn::Conv2dOptions(8, 8, 3).stride(2).padding(1).groups(2)));
    head = register_module("head", nn::Linear(8 * 4 * 4, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return head(torch::relu(conv2(torch::relu(conv1(x)))).flatten(1));
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::Linear head{nullptr};
};
TORCH_MODULE(ConvNet);

using Batches = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

Batches image_batches(int count, std::uint64_t seed) {
  torch::manual_seed(seed);
  Batches out;
  for (int i = 0; i < count; ++i) out.emplace_back(torch::randn({16, 3, 8, 8}), torch::randint(5, {16}));
  return out;
}

double relative(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got - want).norm() / want.norm()).item<double>();
}

/// The float formula above for one converted convolution.
torch::Tensor conv_reference(nn::Conv2dImpl& conv, const quant::StaticInt8Conv2d& kernel, const torch::Tensor& x) {
  const auto in = kernel.input(), out = kernel.output();
  const auto xq = torch::quantize_per_tensor(x, in.scale, in.zero_point, torch::kQUInt8).dequantize();
  const auto exact = torch::conv2d(xq, kernel.qweight().dequantize(), conv.bias, {2, 2}, {1, 1}, {1, 1}, 2);
  return torch::quantize_per_tensor(exact, out.scale, out.zero_point, torch::kQUInt8).dequantize();
}

} // namespace quant_conv_test

using namespace quant_conv_test;

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
