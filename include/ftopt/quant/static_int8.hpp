#pragma once
/// quant::StaticInt8: post-training static quantization of every nn::Linear and nn::Conv2d (but
/// those kept in float), calibrated on data, as torch.ao.quantization's prepare / calibrate /
/// convert: observers learn each layer's input and output ranges, then the layer runs quint8
/// inputs and outputs with fixed scales and qint8 weights (quantized::linear,
/// quantized::conv2d), quantizing its input and dequantizing its output at the float
/// boundaries around it. Unlike torch.ao, Conv2d + BatchNorm (+ ReLU) are not fused first: the
/// BatchNorm runs in float after the int8 convolution.
///
///   ftopt::Trainer<..., ftopt::quant::StaticInt8> trainer(options, {}, lora, {}, {},
///       ftopt::quant::StaticInt8({.activations = {.kind = quant::ObserverKind::Percentile}}));
///   ...fit...
///   trainer.quant().calibrate(model, calibration_batches, /*max_batches=*/32);
///   trainer.finalize(model);   // adapters merged, then converted with the calibrated ranges
///
/// Defaults as torch.ao.quantization.default_per_channel_qconfig: MinMax observers for the
/// activations (affine quint8), per-channel symmetric qint8 weights.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include <ftopt/batch.hpp>
#include <ftopt/quant/dynamic_int8.hpp>
#include <ftopt/quant/support/observer.hpp>

namespace ftopt::quant {

struct StaticInt8Options {
  Granularity granularity = Granularity::PerChannel;
  Engine engine = Engine::Auto;
  ObserverOptions activations;  ///< the input and output observers of each layer
  nn::NamePatterns keep_float;

  void validate() const { activations.validate(); }
};

/// The calibrated int8 kernel attached to one nn::Linear or nn::Conv2d.
template <class Layer>
class StaticInt8Kernel : public nn::Extension<Layer> {
public:
  struct QParams {
    double scale = 1;
    std::int64_t zero_point = 0;
  };
  using Packed = typename LayerOps<Layer>::Packed;

  /// `quant_max`: the top of the activations' integer range, 127 with reduce_range, else 255.
  StaticInt8Kernel(const Layer& layer, at::Tensor qweight, c10::optional<at::Tensor> bias, QParams input,
                   QParams output, std::int64_t quant_max = 255)
      : qweight_(std::move(qweight)), input_(input), output_(output), quant_max_(quant_max),
        packed_(LayerOps<Layer>::prepack(qweight_, bias, layer)) {}

  /// Input and output are held to the calibrated integer range [0, quant_max], as fake
  /// quantization (QAT) holds them: a quint8 tensor itself would run to 255, which with
  /// reduce_range is past the range the kernel is safe from 16-bit saturation in.
  /// With the full range (255) quint8 itself holds them there, and the clamps are skipped.
  at::Tensor forward(Layer&, const at::Tensor& x) override {
    const bool full = quant_max_ == 255;
    at::Tensor input = x.to(at::kFloat);
    if (!full) input = input.clamp(low(input_), high(input_));
    const at::Tensor xq = at::quantize_per_tensor(input.contiguous(), input_.scale, input_.zero_point, at::kQUInt8);
    at::Tensor y = LayerOps<Layer>::run(xq, packed_, output_.scale, output_.zero_point).dequantize();
    return full ? y : y.clamp_(low(output_), high(output_));
  }

  const at::Tensor& qweight() const { return qweight_; }
  QParams input() const { return input_; }
  QParams output() const { return output_; }
  std::int64_t quant_max() const { return quant_max_; }

private:
  static double low(QParams q) { return -static_cast<double>(q.zero_point) * q.scale; }
  double high(QParams q) const { return static_cast<double>(quant_max_ - q.zero_point) * q.scale; }

  at::Tensor qweight_;
  QParams input_, output_;
  std::int64_t quant_max_;
  Packed packed_;
};

using StaticInt8Linear = StaticInt8Kernel<nn::LinearImpl>;
using StaticInt8Conv2d = StaticInt8Kernel<nn::Conv2dImpl>;

/// What calibration (or QAT) learned of one layer's activations.
struct ActivationObservers {
  Observer input, output;
};

namespace detail {

/// Calibration: runs the layer as it was (its extension or its own forward) and observes the
/// input and the output.
template <class Layer>
class Observing : public nn::Extension<Layer> {
public:
  Observing(std::shared_ptr<nn::Extension<Layer>> inner, const ObserverOptions& options)
      : inner(std::move(inner)), seen(std::make_shared<ActivationObservers>(Observer(options), Observer(options))) {}

  at::Tensor forward(Layer& layer, const at::Tensor& x) override {
    at::Tensor y = inner ? inner->forward(layer, x) : layer.base_forward(x);
    seen->input.observe(x);
    seen->output.observe(y);
    return y;
  }
  /// The inner extension's effect where it changes the values, else observing.
  nn::Effect effect() const override {
    const nn::Effect own = inner ? inner->effect() : nn::Effect::none;
    return own == nn::Effect::none ? nn::Effect::observes : own;
  }

  std::shared_ptr<nn::Extension<Layer>> inner;
  std::shared_ptr<ActivationObservers> seen;
};

/// The static int8 kernel for `layer` from its trained or calibrated input and output
/// observers (`what` and `why` name the layer and the likely cause in an error when one of them
/// saw nothing).
template <class Layer>
std::shared_ptr<StaticInt8Kernel<Layer>> static_kernel(const Layer& layer, const ActivationObservers& observed,
                                                       Granularity granularity, bool reduce, const std::string& what,
                                                       const std::string& why = "") {
  const auto [in_scale, in_zp] = observed.input.qparams(reduce, what + " input" + why);
  const auto [out_scale, out_zp] = observed.output.qparams(reduce, what + " output" + why);
  using Kernel = StaticInt8Kernel<Layer>;
  return std::make_shared<Kernel>(layer, quantize_weight(layer.weight, granularity), float_bias(layer),
                                  typename Kernel::QParams{in_scale, in_zp}, typename Kernel::QParams{out_scale, out_zp},
                                  reduce ? 127 : 255);
}

/// Runs up to `max_batches` batches (0: all) through the model in eval mode without gradients
/// (calibration, error measurement), then calls each `undo` and puts the model back in its
/// mode, also when a forward throws. Returns how many batches ran.
template <class M, class R>
std::int64_t run_batches(M& model, R&& batches, std::int64_t max_batches,
                         const std::vector<std::function<void()>>& undo) {
  torch::nn::Module& module = *model;
  const auto params = module.parameters();
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  const bool was_training = module.is_training();
  const auto restore = [&] {
    for (const auto& f : undo) f();
    module.train(was_training);
  };
  module.eval();
  std::int64_t seen = 0;
  try {
    torch::NoGradGuard no_grad;
    for (auto&& batch : batches) {
      if (max_batches > 0 && seen == max_batches) break;
      model->forward(input_of(batch).to(device));
      ++seen;
    }
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return seen;
}

} // namespace detail

class StaticInt8 {
public:
  using axis = ftopt::axis::Quant;
  static constexpr const char* name = "static-int8";  ///< in grids, tables and flags

  StaticInt8() = default;
  explicit StaticInt8(StaticInt8Options options) : options_(std::move(options)) {}

  void validate() const { options_.validate(); }
  const StaticInt8Options& options() const { return options_; }

  void prepare(torch::nn::Module&) {}

  /// Runs up to `max_batches` (0: all) batches through the model in eval mode without
  /// gradients, observing every quantizable Linear's input and output. Calibrating again
  /// starts over. The same batches give the same ranges (no randomness is involved).
  template <class M, BatchRange R>
  void calibrate(M& model, R&& batches, std::int64_t max_batches = 0) {
    std::vector<std::pair<std::string, std::shared_ptr<ActivationObservers>>> observing;
    std::vector<std::function<void()>> undo;
    detail::for_each_quantizable(*model, options_.keep_float, [&]<class Layer>(const std::string& name, Layer* layer) {
      auto o = std::make_shared<detail::Observing<Layer>>(layer->extension(), options_.activations);
      observing.emplace_back(name, o->seen);
      undo.push_back([layer, inner = o->inner] {
        if (inner) layer->attach(inner);
        else layer->detach();
      });
      layer->attach(o);
    });
    const std::int64_t seen = detail::run_batches(model, batches, max_batches, undo);
    ftopt::detail::check(seen > 0, "quant::StaticInt8::calibrate: the calibration set is empty");
    ranges_.clear();
    for (auto& [name, observed] : observing) ranges_.emplace(name, *observed);
    batches_ = seen;
  }

  /// Attaches a calibrated int8 kernel to each quantizable layer (replacing a merged LoRA
  /// branch; a layer with an adapter stays in float, as in DynamicInt8). Needs calibrate()
  /// first; a layer no calibration batch reached is an error.
  void convert(torch::nn::Module& module) {
    ftopt::detail::check(!ranges_.empty(), "quant::StaticInt8::convert: not calibrated; call "
                                           "calibrate(model, batches) before convert (or Trainer::finalize)");
    const at::QEngine engine = select_engine(options_.engine);
    const bool reduce = reduce_range(engine);
    torch::NoGradGuard no_grad;
    quantized_.clear();
    left_float_.clear();
    detail::for_each_quantizable(module, options_.keep_float, [&]<class Layer>(const std::string& name, Layer* layer) {
      if (detail::keeps_float_extension(*layer)) {
        left_float_.push_back(name);
        return;
      }
      ftopt::detail::check(detail::computes_own(*layer), "quant::StaticInt8: layer '",
                           name, "' carries another extension (an unmerged LoRA branch?); merge it before converting");
      auto found = ranges_.find(name);
      ftopt::detail::check(found != ranges_.end(), "quant::StaticInt8: layer '", name,
                           "' was not calibrated (was the model changed after calibrate?)");
      layer->attach(detail::static_kernel(*layer, found->second, options_.granularity, reduce, "layer '" + name + "'"));
      quantized_.push_back(name);
    });
  }

  const std::vector<std::string>& quantized() const { return quantized_; }
  /// The layers the last convert left in float because they carry an adapter.
  const std::vector<std::string>& left_float() const { return left_float_; }
  /// Calibration batches seen by the last calibrate().
  std::int64_t calibration_batches() const { return batches_; }
  /// The observers of a layer after calibrate().
  const ActivationObservers& observers(const std::string& layer) const {
    auto found = ranges_.find(layer);
    ftopt::detail::check(found != ranges_.end(), "quant::StaticInt8: no observers for layer '", layer, "'");
    return found->second;
  }

private:
  StaticInt8Options options_;
  std::map<std::string, ActivationObservers> ranges_;
  std::vector<std::string> quantized_, left_float_;
  std::int64_t batches_ = 0;
};

static_assert(Policy<StaticInt8>);

} // namespace ftopt::quant
