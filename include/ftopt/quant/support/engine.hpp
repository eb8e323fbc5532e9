#pragma once
/// The quantized engine (ATen's qengine: x86, fbgemm, onednn, qnnpack) and the int8 Linear
/// kernels behind it, reached through the dispatcher as torch.ao.quantization reaches them.
///
///   at::QEngine e = quant::select_engine(quant::Engine::Auto);   // and makes it current
///   auto packed = quant::prepack_linear(qweight, bias);          // quantized::linear_prepack
///   auto y = quant::linear_dynamic(x, packed, quant::reduce_range(e));
///   auto yq = quant::linear_static(xq, packed, out_scale, out_zero_point);   // quantized::linear

#include <string>
#include <vector>

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/quantized/PackedParams.h>
#include <c10/core/QEngine.h>

#include <ftopt/error.hpp>
#include <ftopt/hardware.hpp>

namespace ftopt::quant {

/// Which engine runs the int8 kernels. Auto: the fastest this build has on this CPU (x86, then
/// fbgemm, then oneDNN; QNNPACK, made for ARM, last: on x86 it is slower than fp32).
enum class Engine { Auto, X86, Fbgemm, Onednn, Qnnpack };

using PackedLinear = c10::intrusive_ptr<LinearPackedParamsBase>;

namespace detail {

inline std::string engine_name(at::QEngine e) { return c10::toString(e); }

/// The engine's name as the `Engine` value would say it, for messages.
inline const char* to_string(Engine e) {
  switch (e) {
    case Engine::X86: return "x86";
    case Engine::Fbgemm: return "fbgemm";
    case Engine::Onednn: return "onednn";
    case Engine::Qnnpack: return "qnnpack";
    case Engine::Auto: break;
  }
  return "auto";
}

inline std::string supported_names() {
  std::string out;
  for (auto e : at::globalContext().supportedQEngines())
    if (e != at::QEngine::NoQEngine) out += (out.empty() ? "" : ", ") + engine_name(e);
  return out.empty() ? "none" : out;
}

} // namespace detail

/// Makes `wanted` (or, for Auto, the best supported engine) ATen's current qengine and returns
/// it. An engine this build lacks is an ftopt::Error listing the ones it has.
inline at::QEngine select_engine(Engine wanted) {
  const auto& supported = at::globalContext().supportedQEngines();
  const auto has = [&](at::QEngine e) { return std::find(supported.begin(), supported.end(), e) != supported.end(); };
  at::QEngine chosen = at::QEngine::NoQEngine;
  if (wanted == Engine::Auto) {
    for (at::QEngine e : {at::QEngine::X86, at::QEngine::FBGEMM, at::QEngine::ONEDNN, at::QEngine::QNNPACK})
      if (has(e)) {
        chosen = e;
        break;
      }
    ftopt::detail::check(chosen != at::QEngine::NoQEngine,
                         "quant: this LibTorch has no quantized engine (supported: ", detail::supported_names(), ")");
  } else {
    const at::QEngine e = wanted == Engine::X86       ? at::QEngine::X86
                          : wanted == Engine::Fbgemm  ? at::QEngine::FBGEMM
                          : wanted == Engine::Onednn  ? at::QEngine::ONEDNN
                                                      : at::QEngine::QNNPACK;
    ftopt::detail::check(has(e), "quant: engine ", detail::to_string(wanted), " is not in this LibTorch (supported: ",
                         detail::supported_names(), ")");
    chosen = e;
  }
  if (at::globalContext().qEngine() != chosen) at::globalContext().setQEngine(chosen);
  return chosen;
}

/// Whether activations are quantized to 7 bits (reduce_range), as PyTorch's qconfigs do: fbgemm
/// and x86 always; oneDNN only on CPUs without VNNI, where its u8 x s8 pairs are summed in
/// 16 bits (VPMADDUBSW) and full-range activations saturate (PyTorch warns about exactly this
/// for onednn without VNNI; measured here: 22% error at 8 bits, <2% at 7); QNNPACK never.
inline bool reduce_range(at::QEngine e) {
  if (e == at::QEngine::ONEDNN) return !hardware::detail::cpu_supports_vnni();
  return e == at::QEngine::FBGEMM || e == at::QEngine::X86;
}

/// quantized::linear_prepack: a qint8 weight (per tensor or per channel) and a float bias.
inline PackedLinear prepack_linear(const at::Tensor& qweight, const c10::optional<at::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("quantized::linear_prepack", "")
                       .typed<PackedLinear(at::Tensor, c10::optional<at::Tensor>)>();
  return op.call(qweight, bias);
}

/// quantized::linear_dynamic: float input, quantized per call from its own min and max.
inline at::Tensor linear_dynamic(const at::Tensor& input, const PackedLinear& packed, bool reduce) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("quantized::linear_dynamic", "")
                       .typed<at::Tensor(at::Tensor, const PackedLinear&, bool)>();
  return op.call(input, packed, reduce);
}

/// quantized::linear: quint8 input (per tensor) and the packed qint8 weight, quint8 output with
/// the given scale and zero point.
inline at::Tensor linear_static(const at::Tensor& qinput, const PackedLinear& packed, double scale,
                                std::int64_t zero_point) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("quantized::linear", "")
                       .typed<at::Tensor(at::Tensor, const PackedLinear&, double, std::int64_t)>();
  return op.call(qinput, packed, scale, zero_point);
}

} // namespace ftopt::quant
