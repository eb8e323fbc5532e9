#pragma once
/// The layer types quantization handles, and what it needs to know of each: nn::Linear
/// (quantized::linear) and nn::Conv2d (quantized::conv2d, static and QAT only, as in
/// torch.ao.quantization, whose dynamic mode has no convolution either).
///
///   quant::LayerOps<nn::Conv2dImpl>::prepack(qweight, bias, conv);     // conv2d_prepack
///   quant::detail::for_each_quantizable(module, keep_float, [&]<class Layer>(const std::string& name, Layer* layer) {
///     ...   // Layer is nn::LinearImpl or nn::Conv2dImpl
///   });

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/quantized/PackedParams.h>
#include <torch/nn/module.h>

#include <ftopt/nn/conv2d.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/quant/support/engine.hpp>

namespace ftopt::quant {

template <class Layer>
struct LayerOps;

template <>
struct LayerOps<nn::LinearImpl> {
  using Packed = PackedLinear;
  static constexpr const char* name = "nn::Linear";

  static Packed prepack(const at::Tensor& qweight, const c10::optional<at::Tensor>& bias, const nn::LinearImpl&) {
    return prepack_linear(qweight, bias);
  }
  static at::Tensor run(const at::Tensor& qinput, const Packed& packed, double scale, std::int64_t zero_point) {
    return linear_static(qinput, packed, scale, zero_point);
  }
  /// The layer's float computation with another weight (fake quantization's).
  static at::Tensor with_weight(const nn::LinearImpl& layer, const at::Tensor& x, const at::Tensor& weight) {
    return at::linear(x, weight, layer.bias);
  }
};

using PackedConv2d = c10::intrusive_ptr<ConvPackedParamsBase<2>>;

template <>
struct LayerOps<nn::Conv2dImpl> {
  using Packed = PackedConv2d;
  static constexpr const char* name = "nn::Conv2d";

  /// quantized::conv2d_prepack: the qint8 weight with the layer's stride, padding, dilation
  /// and groups.
  static Packed prepack(const at::Tensor& qweight, const c10::optional<at::Tensor>& bias, const nn::Conv2dImpl& conv) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("quantized::conv2d_prepack", "")
                         .typed<Packed(at::Tensor, c10::optional<at::Tensor>, c10::List<std::int64_t>,
                                       c10::List<std::int64_t>, c10::List<std::int64_t>, std::int64_t)>();
    const auto list = [](at::IntArrayRef values) { return c10::List<std::int64_t>(values.vec()); };
    const auto& padding = compat::get<torch::ExpandingArray<2>>(conv.options.padding());
    return op.call(qweight, bias, list(*conv.options.stride()), list(*padding), list(*conv.options.dilation()),
                   conv.options.groups());
  }
  /// quantized::conv2d.new: quint8 NCHW input, quint8 output with the given scale and zero point.
  static at::Tensor run(const at::Tensor& qinput, const Packed& packed, double scale, std::int64_t zero_point) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("quantized::conv2d", "new")
                         .typed<at::Tensor(at::Tensor, const Packed&, double, std::int64_t)>();
    return op.call(qinput, packed, scale, zero_point);
  }
  static at::Tensor with_weight(const nn::Conv2dImpl& conv, const at::Tensor& x, const at::Tensor& weight) {
    const auto& padding = compat::get<torch::ExpandingArray<2>>(conv.options.padding());
    return at::conv2d(x, weight, conv.bias, *conv.options.stride(), *padding, *conv.options.dilation(),
                      conv.options.groups());
  }
};

namespace detail {

/// Calls `f(name, layer)` with a typed pointer (nn::LinearImpl* or nn::Conv2dImpl*) for each
/// ftopt layer of the module, in module order, that is not under `keep_float`. Layers inside
/// another ftopt layer belong to its extension (LoRA's lora_A and lora_B) and are skipped.
template <class F>
void for_each_quantizable(torch::nn::Module& module, const nn::NamePatterns& keep_float, F&& f) {
  std::vector<std::string> outer;  // the ftopt layers seen so far
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    auto* linear = item.value()->as<nn::LinearImpl>();
    auto* conv = item.value()->as<nn::Conv2dImpl>();
    if (linear == nullptr && conv == nullptr) continue;
    const std::string& name = item.key();
    const bool nested = std::any_of(outer.begin(), outer.end(), [&](const std::string& o) {
      return o.empty() || name.rfind(o + ".", 0) == 0;
    });
    if (nested) continue;
    outer.push_back(name);
    bool kept = false;
    for (const auto& pattern : keep_float) kept = kept || nn::detail::under(pattern, name);
    if (kept) continue;
    if (linear != nullptr) f(name, linear);
    else f(name, conv);
  }
}

/// The quantizable layers of one type, by name, in module order.
template <class Layer>
std::vector<std::pair<std::string, Layer*>> quantizable(torch::nn::Module& module, const nn::NamePatterns& keep_float) {
  std::vector<std::pair<std::string, Layer*>> out;
  for_each_quantizable(module, keep_float, [&]<class Any>(const std::string& name, Any* layer) {
    if constexpr (std::is_same_v<Any, Layer>) out.emplace_back(name, layer);
  });
  return out;
}

/// Whether the layer carries an extension that stays for inference and cannot be merged (an
/// adapter): quantization leaves such a layer in float.
template <class Layer>
bool keeps_float_extension(const Layer& layer) {
  return layer.effect() == nn::Effect::stays;
}

/// Whether the layer computes its own values (nothing attached, a folded branch, an observer):
/// a converting policy may then replace what is attached.
template <class Layer>
bool computes_own(const Layer& layer) {
  return layer.effect() == nn::Effect::none || layer.effect() == nn::Effect::observes;
}

template <class Layer>
c10::optional<at::Tensor> float_bias(const Layer& layer) {
  if (!layer.bias.defined()) return c10::nullopt;
  return layer.bias.detach().to(at::kFloat).contiguous();
}

} // namespace detail
} // namespace ftopt::quant
