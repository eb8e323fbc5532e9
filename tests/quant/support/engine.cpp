// Tests for include/ftopt/quant/support/engine.hpp: the engine chosen (x86, then fbgemm, oneDNN,
// QNNPACK) becomes ATen's current one, an engine this build lacks is named with the ones it has,
// reduce_range follows PyTorch's qconfigs, and the int8 Linear kernels compute what
// torch.ao.quantization defines: the dynamic one dequant(x) . dequant(W)^T + b with x quantized
// per call (int8_reference.hpp), the static one the same product from a quint8 input,
// requantized once to the output's scale and zero point (to within one output step).
#include <catch2/catch.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/detail/scope_exit.hpp>
#include <ftopt/quant/support/engine.hpp>

#include "../../support.hpp"
#include "../int8_reference.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {

bool supported(at::QEngine e) {
  const auto& all = at::globalContext().supportedQEngines();
  return std::find(all.begin(), all.end(), e) != all.end();
}

} // namespace

TEST_CASE("select_engine: the best engine by default, one by name, or the ones this build has", "[quant][int8]") {
  const at::QEngine previous = at::globalContext().qEngine();
  const ftopt::detail::ScopeExit restore([&] { at::globalContext().setQEngine(previous); });
  at::QEngine best = at::QEngine::NoQEngine;
  for (auto e : {at::QEngine::X86, at::QEngine::FBGEMM, at::QEngine::ONEDNN, at::QEngine::QNNPACK})
    if (best == at::QEngine::NoQEngine && supported(e)) best = e;
  REQUIRE(best != at::QEngine::NoQEngine);  // both LibTorch builds have a quantized engine
  CHECK(quant::select_engine(quant::Engine::Auto) == best);
  CHECK(at::globalContext().qEngine() == best);

  const std::vector<std::pair<quant::Engine, at::QEngine>> named = {{quant::Engine::X86, at::QEngine::X86},
                                                                    {quant::Engine::Fbgemm, at::QEngine::FBGEMM},
                                                                    {quant::Engine::Onednn, at::QEngine::ONEDNN},
                                                                    {quant::Engine::Qnnpack, at::QEngine::QNNPACK}};
  for (const auto& [wanted, engine] : named) {
    INFO(quant::detail::to_string(wanted));
    if (supported(engine)) {
      CHECK(quant::select_engine(wanted) == engine);
      CHECK(at::globalContext().qEngine() == engine);
    } else {
      CHECK_THAT(test::message_of([&] { quant::select_engine(wanted); }),
                 Contains(std::string("quant: engine ") + quant::detail::to_string(wanted) +
                          " is not in this LibTorch (supported: "));
    }
  }
}

TEST_CASE("reduce_range: 7-bit activations where PyTorch's qconfigs use them", "[quant][int8]") {
  // get_default_qconfig("fbgemm") and ("x86"): reduce_range=True; ("qnnpack"): False. oneDNN:
  // 7 bits only where its u8 x s8 products are summed in 16 bits, i.e. without VNNI.
  CHECK(quant::reduce_range(at::QEngine::FBGEMM));
  CHECK(quant::reduce_range(at::QEngine::X86));
  CHECK_FALSE(quant::reduce_range(at::QEngine::QNNPACK));
  CHECK(quant::reduce_range(at::QEngine::ONEDNN) == !hardware::detail::cpu_supports_vnni());
}

TEST_CASE("The int8 Linear kernels: the dynamic and the static product as PyTorch defines them", "[quant][int8]") {
  const at::QEngine previous = at::globalContext().qEngine();
  const ftopt::detail::ScopeExit restore([&] { at::globalContext().setQEngine(previous); });
  const at::QEngine engine = quant::select_engine(quant::Engine::Auto);
  const bool reduce = quant::reduce_range(engine);
  torch::manual_seed(22);
  const auto w = torch::randn({6, 16}), bias = torch::randn({6}), x = torch::randn({8, 16});
  // A symmetric qint8 weight, as the weight observers give.
  const auto qweight = torch::quantize_per_tensor(w, w.abs().max().item<double>() / 127, 0, torch::kQInt8);
  const auto packed = quant::prepack_linear(qweight, bias);
  CHECK(torch::equal(std::get<0>(packed->unpack()).int_repr(), qweight.int_repr()));

  SECTION("linear_dynamic") {
    const auto y = quant::linear_dynamic(x, packed, reduce);
    CHECK(y.scalar_type() == torch::kFloat);
    CHECK(quant_test::relative_error(y, quant_test::dynamic_reference(x, qweight, bias, reduce)) < 1e-4);
  }
  SECTION("linear_static") {
    // The input on 7 bits (no u8 x s8 pair can saturate), the output on 8.
    const auto [in_scale, in_zero] = quant_test::quint8_params(x, 127);
    const auto xq = torch::quantize_per_tensor(x, in_scale, in_zero, torch::kQUInt8);
    const auto exact = torch::nn::functional::linear(xq.dequantize(), qweight.dequantize(), bias);
    const auto [out_scale, out_zero] = quant_test::quint8_params(exact, 255);
    const auto y = quant::linear_static(xq, packed, out_scale, out_zero);
    CHECK(y.scalar_type() == torch::kQUInt8);
    CHECK(y.q_scale() == Approx(out_scale));
    CHECK(y.q_zero_point() == out_zero);
    const auto requantized = torch::quantize_per_tensor(exact, out_scale, out_zero, torch::kQUInt8).dequantize();
    CHECK((y.dequantize() - requantized).abs().max().item<double>() <= out_scale * 1.001);
  }
}
