// Tests for include/ftopt/quant/support/layers.hpp: which layers quantization visits (ftopt's
// nn::Linear and nn::Conv2d, in module order, none inside another ftopt layer, none under
// keep_float), what it asks of their extensions, and each layer type's operations: the float
// computation with another weight, and quantized::conv2d as torch.ao.quantization's static
// Conv2d computes it (quant(conv2d(dequant(x_q), dequant(W_q), b), out scale, out zero point),
// to within one output step).
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/detail/scope_exit.hpp>
#include <ftopt/quant/support/layers.hpp>

#include "../../support.hpp"
#include "../conv_net.hpp"
#include "../int8_reference.hpp"

using namespace ftopt;
using ftopt::test::quant_conv::ConvNet;

namespace {

/// Each layer for_each_quantizable visits: its name and type.
std::vector<std::string> visited(torch::nn::Module& module, const nn::NamePatterns& keep_float = {}) {
  std::vector<std::string> out;
  quant::detail::for_each_quantizable(module, keep_float, [&]<class Layer>(const std::string& name, Layer*) {
    out.push_back(name + (std::is_same_v<Layer, nn::LinearImpl> ? " Linear" : " Conv2d"));
  });
  return out;
}

/// An extension with a given effect (its forward is the layer's own).
struct WithEffect : nn::Extension<nn::LinearImpl> {
  explicit WithEffect(nn::Effect e) : e(e) {}
  at::Tensor forward(nn::LinearImpl& layer, const at::Tensor& x) override { return layer.base_forward(x); }
  nn::Effect effect() const override { return e; }
  nn::Effect e;
};

} // namespace

TEST_CASE("for_each_quantizable: ftopt's layers in module order, outer ones only, keep_float left out", "[quant]") {
  ConvNet model;  // conv1, conv2 (nn::Conv2d), head (nn::Linear)
  model->head->register_module("inner", nn::Linear(2, 2));  // inside an ftopt layer: its extension's
  CHECK(visited(*model) == std::vector<std::string>{"conv1 Conv2d", "conv2 Conv2d", "head Linear"});
  CHECK(visited(*model, {"conv2"}) == std::vector<std::string>{"conv1 Conv2d", "head Linear"});
  CHECK(visited(*model, {"head"}) == std::vector<std::string>{"conv1 Conv2d", "conv2 Conv2d"});
  nn::Linear alone(3, 2);  // the module itself is a layer: named ""
  CHECK(visited(*alone) == std::vector<std::string>{" Linear"});

  const auto convs = quant::detail::quantizable<nn::Conv2dImpl>(*model, {});
  REQUIRE(convs.size() == 2);
  CHECK(convs[1].first == "conv2");
  CHECK(convs[1].second == model->conv2.get());
  CHECK(quant::detail::quantizable<nn::LinearImpl>(*model, {"head"}).empty());
}

TEST_CASE("What quantization asks of a layer: its extension's effect and its bias in float", "[quant]") {
  nn::Linear linear(4, 3);
  CHECK(quant::detail::computes_own(*linear));  // nothing attached
  CHECK_FALSE(quant::detail::keeps_float_extension(*linear));
  const std::vector<std::pair<nn::Effect, std::pair<bool, bool>>> cases = {
      {nn::Effect::none, {true, false}},
      {nn::Effect::observes, {true, false}},
      {nn::Effect::changes, {false, false}},
      {nn::Effect::stays, {false, true}}};
  for (const auto& [effect, expected] : cases) {
    linear->attach(std::make_shared<WithEffect>(effect));
    CHECK(quant::detail::computes_own(*linear) == expected.first);
    CHECK(quant::detail::keeps_float_extension(*linear) == expected.second);
  }

  linear->to(torch::kBFloat16);
  const auto bias = quant::detail::float_bias(*linear);
  REQUIRE(bias.has_value());
  CHECK(bias->scalar_type() == torch::kFloat);
  CHECK(torch::equal(*bias, linear->bias.to(torch::kFloat)));
  nn::Linear no_bias(torch::nn::LinearOptions(4, 3).bias(false));
  CHECK_FALSE(quant::detail::float_bias(*no_bias).has_value());
}

TEST_CASE("LayerOps: each layer's float computation with another weight, and quantized::conv2d", "[quant]") {
  torch::manual_seed(23);
  ConvNet model;  // conv2: 8 -> 8 channels, 3x3, stride 2, padding 1, groups 2
  const auto x = torch::randn({2, 8, 8, 8});
  const auto other = torch::randn({8, 4, 3, 3}) * 0.1;
  using ConvOps = quant::LayerOps<nn::Conv2dImpl>;
  CHECK(torch::equal(ConvOps::with_weight(*model->conv2, x, model->conv2->weight), model->conv2->forward(x)));
  CHECK(torch::allclose(ConvOps::with_weight(*model->conv2, x, other),
                        torch::conv2d(x, other, model->conv2->bias, {2, 2}, {1, 1}, {1, 1}, 2)));
  const auto features = torch::randn({3, 8 * 4 * 4});
  const auto head_weight = torch::randn({5, 8 * 4 * 4});
  CHECK(torch::equal(quant::LayerOps<nn::LinearImpl>::with_weight(*model->head, features, head_weight),
                     torch::nn::functional::linear(features, head_weight, model->head->bias)));

  SECTION("prepack and run: quantized::conv2d, to one output step") {
    const at::QEngine previous = at::globalContext().qEngine();
    const ftopt::detail::ScopeExit restore([&] { at::globalContext().setQEngine(previous); });
    quant::select_engine(quant::Engine::Auto);
    auto& conv = *model->conv2;
    // The weight symmetric per output channel (scale amax / 127, zero 0), the input on 7 bits.
    const auto w = conv.weight.detach();
    const auto scales = std::get<0>(w.abs().flatten(1).max(1)).to(torch::kDouble) / 127;
    const auto qweight = torch::quantize_per_channel(w, scales, torch::zeros({8}, torch::kLong), 0, torch::kQInt8);
    const auto [in_scale, in_zero] = quant_test::quint8_params(x, 127);
    const auto xq = torch::quantize_per_tensor(x, in_scale, in_zero, torch::kQUInt8);
    const auto exact = torch::conv2d(xq.dequantize(), qweight.dequantize(), conv.bias, {2, 2}, {1, 1}, {1, 1}, 2);
    const auto [out_scale, out_zero] = quant_test::quint8_params(exact, 255);
    const auto packed = ConvOps::prepack(qweight, quant::detail::float_bias(conv), conv);
    const auto y = ConvOps::run(xq, packed, out_scale, out_zero);
    CHECK(y.sizes() == exact.sizes());
    const auto requantized = torch::quantize_per_tensor(exact, out_scale, out_zero, torch::kQUInt8).dequantize();
    CHECK((y.dequantize() - requantized).abs().max().item<double>() <= out_scale * 1.001);
  }
}
