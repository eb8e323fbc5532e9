// quant::DynamicInt8 against what torch.ao.quantization.quantize_dynamic computes:
//  - weights: MinMaxObserver / PerChannelMinMaxObserver with qint8 and a symmetric qscheme
//    (torch/ao/quantization/observer.py, _calculate_qparams): scale = max(-min, max) / 127.5,
//    zero point 0;
//  - activations: per call, quint8 from the tensor's own range extended to include 0
//    (ATen's quant_utils::ChooseQuantizationParams): scale = (max - min) / 255 (127 with
//    reduce_range), zero point = round(-min / scale);
//  - output: the int8 product dequantized, i.e. dequant(x) . dequant(W)^T + b.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/peft/adapter.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/quant/dynamic_int8.hpp>
#include <ftopt/quant/files/int8.hpp>
#include <ftopt/quant/qat.hpp>
#include <ftopt/quant/support/report.hpp>
#include <ftopt/quant/static_int8.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"
#include "int8_reference.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using ftopt::test::ScratchDir;

namespace quant_test {

/// Three SGD steps on `x` with random labels, then Trainer::finalize; returns the trained
/// model's outputs on `x` before finalize.
template <class T>
torch::Tensor train_then_finalize(T& trainer, models::Mlp& model, const torch::Tensor& x) {
  auto& params = trainer.prepare(model);
  torch::optim::SGD optimizer(params, 0.5);
  auto y = torch::randint(3, {x.size(0)});
  for (int i = 0; i < 3; ++i) trainer.train_step(model, optimizer, std::pair{x, y});
  model->eval();
  auto trained = model->forward(x).detach();
  trainer.finalize(model);
  return trained;
}

} // namespace quant_test

using namespace quant_test;

TEST_CASE("quantize_weight: symmetric qint8 scales as PyTorch's MinMax observers", "[quant][int8]") {
  torch::manual_seed(3);
  const auto w = torch::randn({8, 16});
  SECTION("per tensor") {
    const auto q = quant::quantize_weight(w, quant::Granularity::PerTensor);
    const double amax = w.abs().max().item<double>();
    CHECK(q.q_scale() == Approx(amax / 127.5).epsilon(1e-12));
    CHECK(q.q_zero_point() == 0);
    CHECK(torch::equal(q.int_repr().to(torch::kFloat), torch::clamp(torch::round(w / q.q_scale()), -128, 127)));
  }
  SECTION("per channel") {
    const auto q = quant::quantize_weight(w, quant::Granularity::PerChannel);
    const auto amax = std::get<0>(w.abs().max(1)).to(torch::kDouble);
    CHECK(torch::allclose(q.q_per_channel_scales(), amax / 127.5, 1e-12, 0));
    CHECK(q.q_per_channel_zero_points().abs().sum().item<std::int64_t>() == 0);
  }
}

TEST_CASE("DynamicInt8 Linear: the int8 product as PyTorch defines it, within 2% of float", "[quant][int8]") {
  torch::manual_seed(4);
  ftopt::nn::Linear linear(64, 32);
  auto x = torch::randn({16, 64});
  const auto expected = linear->forward(x).detach();
  for (auto granularity : {quant::Granularity::PerTensor, quant::Granularity::PerChannel}) {
    quant::DynamicInt8 policy({.granularity = granularity});
    policy.convert(*linear);
    REQUIRE(policy.quantized().size() == 1);  // the layer itself, named ""
    auto int8 = std::dynamic_pointer_cast<quant::DynamicInt8Linear>(linear->extension());
    REQUIRE(int8);
    const auto got = linear->forward(x);
    const bool reduce = quant::reduce_range(at::globalContext().qEngine());
    CHECK(relative_error(got, dynamic_reference(x, int8->qweight(), linear->bias, reduce)) < 1e-4);
    CHECK(relative_error(got, expected) < 0.02);
    // A batch of 3-D tokens, as the ViT feeds it.
    const auto tokens = torch::randn({2, 5, 64});
    CHECK(relative_error(linear->forward(tokens), at::linear(tokens, linear->weight, linear->bias)) < 0.02);
  }
}

TEST_CASE("DynamicInt8 on a model: keep_float, Trainer::finalize after LoRA, errors", "[quant][int8]") {
  auto model = test::small_mlp(5);
  auto x = torch::randn({32, 6});
  const auto expected = model->forward(x).detach();

  SECTION("every Linear but the kept one") {
    quant::DynamicInt8 policy({.keep_float = {"2"}});
    policy.convert(*model);
    CHECK(policy.quantized() == std::vector<std::string>{"layers.0"});
    auto modules = model->named_modules("", false);
    CHECK(modules["layers.2"]->as<ftopt::nn::LinearImpl>()->extension() == nullptr);
    CHECK(relative_error(model->forward(x), expected) < 0.02);
  }
  SECTION("an unmerged LoRA branch is refused") {
    peft::Lora lora({.r = 2, .alpha = 4, .targets = {"0"}});
    lora.attach(*model);
    CHECK_THAT(test::message_of([&] { quant::DynamicInt8().convert(*model); }),
               Contains("layer 'layers.0' carries another extension (an unmerged LoRA branch?)"));
  }
  SECTION("finalize: LoRA merged, then quantized") {
    Trainer<precision::Fp32, peft::Lora, memory::None, parallel::Single, quant::DynamicInt8> trainer(
        test::quiet(), {}, peft::Lora({.r = 2, .alpha = 4, .targets = {"0", "2"}}));
    const auto trained = train_then_finalize(trainer, model, x);
    CHECK(trainer.quant().quantized().size() == 2);
    CHECK(relative_error(model->forward(x), trained) < 0.02);
  }
  SECTION("a layer with an adapter stays in float, the others are quantized") {
    // A bottleneck adapter is non-linear and cannot be merged: the layer it extends keeps its
    // float weight and its adapter; the rest goes int8.
    Trainer<precision::Fp32, peft::Adapter, memory::None, parallel::Single, quant::DynamicInt8> trainer(
        test::quiet(), {}, peft::Adapter({.reduction_factor = 4, .targets = {"0"}, .modules_to_save = {"2"}}));
    const auto trained = train_then_finalize(trainer, model, x);
    CHECK(trainer.quant().left_float() == std::vector<std::string>{"layers.0"});
    CHECK(trainer.quant().quantized() == std::vector<std::string>{"layers.2"});
    auto modules = model->named_modules("", false);
    CHECK(std::dynamic_pointer_cast<peft::AdapterBranch>(modules["layers.0"]->as<ftopt::nn::LinearImpl>()->extension()));
    CHECK(relative_error(model->forward(x), trained) < 0.02);
  }
  SECTION("an engine asked for by name: refused where this build lacks it, used where it has it") {
    // Debian's 1.13 has onednn and qnnpack; the pip wheel (2.x) has x86, fbgemm, onednn, qnnpack.
    const auto& supported = at::globalContext().supportedQEngines();
    if (std::find(supported.begin(), supported.end(), at::QEngine::X86) == supported.end()) {
      CHECK_THAT(test::message_of([&] { quant::DynamicInt8({.engine = quant::Engine::X86}).convert(*model); }),
                 Contains("engine x86 is not in this LibTorch (supported: "));
    } else {
      at::globalContext().setQEngine(at::QEngine::ONEDNN);  // another engine first: x86 must replace it
      quant::DynamicInt8 x86({.engine = quant::Engine::X86});
      x86.convert(*model);
      CHECK(at::globalContext().qEngine() == at::QEngine::X86);
      CHECK(x86.quantized() == std::vector<std::string>{"layers.0", "layers.2"});
      CHECK(relative_error(model->forward(x), expected) < 0.02);  // and it computes the model
    }
  }
  SECTION("nothing to quantize") {
    CHECK_THAT(test::message_of([&] { quant::DynamicInt8({.keep_float = {"layers"}}).convert(*model); }),
               Contains("no nn::Linear to quantize outside keep_float"));
  }
}

TEST_CASE("StaticInt8: calibrated, deterministic, close to float, and its errors", "[quant][static]") {
  torch::manual_seed(8);
  models::Mlp model({.in = 32, .hidden = {64}, .out = 10});
  auto x = torch::randn({256, 32}), y = torch::randint(10, {256});
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int i = 0; i < 4; ++i) batches.emplace_back(x.narrow(0, 64 * i, 64), y.narrow(0, 64 * i, 64));
  model->eval();
  const auto expected = model->forward(x).detach();

  quant::StaticInt8 policy;
  policy.calibrate(model, batches);
  CHECK(policy.calibration_batches() == 4);
  quant::StaticInt8 again;
  again.calibrate(model, batches);
  CHECK(policy.observers("layers.0").input.range("a") == again.observers("layers.0").input.range("b"));
  CHECK(policy.observers("layers.0").input.range("x") == std::pair{x.min().item<double>(), x.max().item<double>()});

  policy.convert(*model);
  CHECK(policy.quantized() == std::vector<std::string>{"layers.0", "layers.2"});
  const auto got = model->forward(x);
  CHECK(relative_error(got, expected) < 0.03);

  SECTION("what the kernel computes: quantize, int8 product requantized, dequantize") {
    auto modules = model->named_modules("", false);
    auto* first = modules["layers.0"]->as<ftopt::nn::LinearImpl>();
    auto kernel = std::dynamic_pointer_cast<quant::StaticInt8Linear>(first->extension());
    REQUIRE(kernel);
    const auto [in, out] = std::pair{kernel->input(), kernel->output()};
    const auto xq = torch::quantize_per_tensor(x, in.scale, in.zero_point, torch::kQUInt8).dequantize();
    const auto exact = torch::nn::functional::linear(xq, kernel->qweight().dequantize(), first->bias);
    const auto requantized = torch::quantize_per_tensor(exact, out.scale, out.zero_point, torch::kQUInt8).dequantize();
    // One output step (scale) of difference at most: the kernel rounds its int32 accumulator once.
    CHECK((first->forward(x) - requantized).abs().max().item<double>() <= out.scale * 1.001);
  }
  SECTION("per-layer errors: small, in module order, the model left as it was") {
    const auto errors = quant::layer_errors(model, batches);
    REQUIRE(errors.size() == 2);
    CHECK(errors[0].layer == "layers.0");
    for (const auto& e : errors) CHECK((e.relative_error > 0 && e.relative_error < 0.03));
    CHECK(torch::equal(model->forward(x), got));
  }
  SECTION("errors: no calibration, an empty calibration set") {
    models::Mlp other({.in = 32, .hidden = {64}, .out = 10});
    CHECK_THAT(test::message_of([&] { quant::StaticInt8().convert(*other); }), Contains("not calibrated; call calibrate"));
    std::vector<std::pair<torch::Tensor, torch::Tensor>> none;
    CHECK_THAT(test::message_of([&] { quant::StaticInt8().calibrate(other, none); }),
               Contains("the calibration set is empty"));
    CHECK(other->named_modules("", false)["layers.0"]->as<ftopt::nn::LinearImpl>()->extension() == nullptr);
  }
}

TEST_CASE("StaticInt8 after LoRA: calibrate through the adapters, finalize merges then converts", "[quant][static]") {
  auto model = test::small_mlp(9);
  auto x = torch::randn({64, 6}), y = torch::randint(3, {64});
  Trainer<precision::Fp32, peft::Lora, memory::None, parallel::Single, quant::StaticInt8> trainer(
      test::quiet(), {}, peft::Lora({.r = 2, .alpha = 4, .targets = {"0"}}));
  auto& params = trainer.prepare(model);
  torch::optim::SGD optimizer(params, 0.5);
  for (int i = 0; i < 3; ++i) trainer.train_step(model, optimizer, std::pair{x, y});
  model->eval();
  const auto trained = model->forward(x).detach();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> calibration{{x, y}};
  trainer.quant().calibrate(model, calibration);
  CHECK(torch::equal(model->forward(x), trained));  // calibration left the LoRA model as it was
  trainer.finalize(model);
  CHECK(relative_error(model->forward(x), trained) < 0.05);
}

// ---- Qat: fake quantization with straight-through gradients (ATen's fake_quantize_*: the
// gradient is the incoming one where round(x / scale) + zero_point lies in [quant_min,
// quant_max], zero elsewhere), then conversion to the static int8 model ----

TEST_CASE("Qat: straight-through gradients, frozen observers, converted outputs match", "[quant][qat]") {
  torch::manual_seed(10);
  ftopt::nn::Linear linear(8, 4);
  quant::Qat qat({.granularity = quant::Granularity::PerChannel, .freeze_observers_after = 2});
  qat.prepare(*linear);
  auto fake = qat.layers().front().second;
  linear->train();
  for (int i = 0; i < 3; ++i) linear->forward(torch::rand({16, 8}) * 2 - 1);  // inputs in [-1, 1)
  CHECK(fake->input().batches() == 2);  // frozen after 2
  CHECK(fake->frozen());

  SECTION("gradients: the straight-through formula") {
    auto x = (torch::rand({5, 8}) * 2 - 1).requires_grad_();
    {
      torch::NoGradGuard no_grad;
      x.index_put_({0, 0}, 3.0);   // far outside the input range the observers froze
      x.index_put_({1, 3}, -2.5);
    }
    const auto r = torch::randn({5, 4});
    linear->weight.mutable_grad() = torch::Tensor();
    (linear->forward(x) * r).sum().backward();
    const bool reduce = quant::reduce_range(at::globalContext().qEngine());
    const double qmax = reduce ? 127 : 255;
    auto in_mask = [&](const torch::Tensor& t, const quant::Observer& o) {
      const auto [s, z] = o.qparams(reduce, "t");
      const auto q = torch::round(t / s) + static_cast<double>(z);
      return ((q >= 0) & (q <= qmax)).to(torch::kFloat);
    };
    const auto xd = x.detach();
    const auto [si, zi] = fake->input().qparams(reduce, "in");
    const auto x_fq = torch::fake_quantize_per_tensor_affine(xd, si, zi, 0, static_cast<std::int64_t>(qmax));
    const auto w_fq = fake->fake_quantize_weight(linear->weight.detach());
    const auto y = torch::nn::functional::linear(x_fq, w_fq, linear->bias.detach());
    const auto g = r * in_mask(y, fake->output());
    const auto dx = g.matmul(w_fq) * in_mask(xd, fake->input());
    // The weight's own mask: with scale amax / 127.5 a channel's largest positive weight rounds
    // to 128, past quant_max 127, and gets no gradient (as in PyTorch).
    const auto w = linear->weight.detach();
    const auto w_scale = std::get<0>(w.abs().max(1)) / 127.5;
    const auto w_q = torch::round(w / w_scale.unsqueeze(1));
    const auto dw = g.t().matmul(x_fq) * ((w_q >= -128) & (w_q <= 127)).to(torch::kFloat);
    CHECK(((w_q > 127).sum().item<std::int64_t>() > 0));
    CHECK(x.grad()[0][0].item<double>() == 0.0);
    CHECK(x.grad()[1][3].item<double>() == 0.0);
    CHECK(torch::allclose(x.grad(), dx, 1e-5, 1e-6));
    CHECK(torch::allclose(linear->weight.grad(), dw, 1e-5, 1e-6));
    CHECK(torch::allclose(linear->bias.grad(), g.sum(0), 1e-5, 1e-6));
  }
  SECTION("convert: the int8 model gives the fake-quantized outputs, to one output step") {
    linear->eval();
    const auto x = torch::rand({32, 8}) * 2 - 1;
    const auto fake_quantized = linear->forward(x).detach();
    qat.convert(*linear);
    auto kernel = std::dynamic_pointer_cast<quant::StaticInt8Linear>(linear->extension());
    REQUIRE(kernel);
    CHECK((linear->forward(x) - fake_quantized).abs().max().item<double>() <= kernel->output().scale * 1.001);
  }
}

TEST_CASE("Qat in the Trainer: trains, converts, a LoRA layer is refused", "[quant][qat]") {
  auto model = test::small_mlp(11);
  auto x = torch::randn({64, 6}), y = torch::randint(3, {64});
  SECTION("training lowers the loss; finalize gives the int8 model") {
    Trainer<precision::Fp32, peft::Full, memory::None, parallel::Single, quant::Qat> trainer(test::quiet());
    auto& params = trainer.prepare(model);
    torch::optim::Adam optimizer(params, 1e-2);
    const double first = trainer.train_step(model, optimizer, std::pair{x, y}).loss.item<double>();
    double last = first;
    for (int i = 0; i < 30; ++i) last = trainer.train_step(model, optimizer, std::pair{x, y}).loss.item<double>();
    CHECK(last < 0.8 * first);
    model->eval();
    const auto fake_quantized = model->forward(x).detach();
    trainer.finalize(model);
    CHECK(relative_error(model->forward(x), fake_quantized) < 0.03);
  }
  SECTION("LoRA") {
    Trainer<precision::Fp32, peft::Lora, memory::None, parallel::Single, quant::Qat> trainer(
        test::quiet(), {}, peft::Lora({.r = 2, .alpha = 4, .targets = {"0"}}));
    CHECK_THAT(test::message_of([&] { trainer.prepare(model); }),
               Contains("quant::Qat: layer 'layers.0' carries another extension (a LoRA branch?)"));
  }
}
