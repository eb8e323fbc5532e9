#pragma once
/// quant::layer_errors: how much each int8 layer of a converted model changes its own output,
/// measured on data: the relative L2 error ||y_int8 - y_float|| / ||y_float|| of each layer,
/// where both see the same input (the input the quantized model feeds it, so errors upstream
/// are not counted twice). Sort it to find the layers to keep in float (`keep_float`).
///
///   auto errors = quant::layer_errors(model, calibration_batches, 8);
///   for (auto& e : errors) std::cout << e.layer << " " << e.relative_error << "\n";

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/nn/module.h>

#include <ftopt/batch.hpp>
#include <ftopt/quant/dynamic_int8.hpp>
#include <ftopt/quant/static_int8.hpp>

namespace ftopt::quant {

struct LayerError {
  std::string layer;
  double relative_error = 0;  ///< ||y_int8 - y_float|| / ||y_float|| over the batches
};

namespace detail {

struct Distance {
  double error = 0, norm = 0;  ///< sums of squares: (int8 - float) and float
};

/// Wraps an int8 kernel: returns its output and accumulates its distance to the float one.
template <class Layer>
class Measuring : public nn::Extension<Layer> {
public:
  explicit Measuring(std::shared_ptr<nn::Extension<Layer>> kernel) : kernel(std::move(kernel)) {}
  at::Tensor forward(Layer& layer, const at::Tensor& x) override {
    at::Tensor y = kernel->forward(layer, x);
    const at::Tensor reference = layer.base_forward(x.to(layer.weight.scalar_type()));
    distance->error += (y.to(at::kDouble) - reference.to(at::kDouble)).pow(2).sum().item<double>();
    distance->norm += reference.to(at::kDouble).pow(2).sum().item<double>();
    return y;
  }
  std::shared_ptr<nn::Extension<Layer>> kernel;
  std::shared_ptr<Distance> distance = std::make_shared<Distance>();
};

/// Whether `extension` is one of ftopt's int8 kernels.
template <class Layer>
bool is_int8(const std::shared_ptr<nn::Extension<Layer>>& extension) {
  if constexpr (std::is_same_v<Layer, nn::LinearImpl>)
    if (std::dynamic_pointer_cast<DynamicInt8Linear>(extension)) return true;
  return std::dynamic_pointer_cast<StaticInt8Kernel<Layer>>(extension) != nullptr;
}

} // namespace detail

/// Each int8 layer's relative output error over up to `max_batches` batches (0: all), in module
/// order. The model must be converted (DynamicInt8 or StaticInt8); it is left as it was.
template <class M, BatchRange R>
std::vector<LayerError> layer_errors(M& model, R&& batches, std::int64_t max_batches = 0) {
  torch::nn::Module& module = *model;
  std::vector<std::pair<std::string, std::shared_ptr<detail::Distance>>> measured;
  std::vector<std::function<void()>> undo;
  detail::for_each_quantizable(module, {}, [&]<class Layer>(const std::string& name, Layer* layer) {
    if (!detail::is_int8(layer->extension())) return;
    auto m = std::make_shared<detail::Measuring<Layer>>(layer->extension());
    undo.push_back([layer, kernel = m->kernel] { layer->attach(kernel); });
    layer->attach(m);
    measured.emplace_back(name, m->distance);
  });
  ftopt::detail::check(!measured.empty(), "quant::layer_errors: the model has no int8 layer (convert it first)");
  const std::int64_t seen = detail::run_batches(model, batches, max_batches, undo);
  std::vector<LayerError> out;
  for (auto& [name, d] : measured) out.push_back({name, d->norm > 0 ? std::sqrt(d->error / d->norm) : 0.0});
  ftopt::detail::check(seen > 0, "quant::layer_errors: no batches");
  return out;
}

} // namespace ftopt::quant
