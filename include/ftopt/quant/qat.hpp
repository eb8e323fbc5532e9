#pragma once
/// quant::Qat: quantization-aware training, as torch.ao.quantization's prepare_qat / convert.
/// While training, every quantizable nn::Linear and nn::Conv2d runs fake-quantized: its input
/// and output through ATen's fake_quantize_per_tensor_affine (quint8, ranges from moving-average
/// observers), its weight through fake_quantize_per_channel_affine (or per tensor; symmetric
/// qint8 from the current weight). Gradients pass straight through inside the clamp range and
/// are zero outside it. After `freeze_observers_after` training micro-batches (or freeze())
/// the ranges stop moving; convert() then builds the static int8 model (StaticInt8Kernel)
/// from exactly those ranges and the same weight quantization.
///
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::None,
///                  ftopt::parallel::Single, ftopt::quant::Qat> trainer(options, {}, {}, {}, {},
///       ftopt::quant::Qat({.freeze_observers_after = 500}));
///   ...fit...
///   trainer.finalize(model);   // the int8 model
///
/// Fake quantization is computed in float32 (autocast is off inside these layers); fp16
/// autocast with Qat does not compile (rules.hpp). A layer that carries a LoRA branch cannot be
/// fake-quantized: keep it in float (keep_float) or train it fully. A layer with an adapter
/// stays in float (left_float()).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/nn/module.h>

#include <ftopt/quant/dynamic_int8.hpp>
#include <ftopt/quant/support/observer.hpp>
#include <ftopt/quant/static_int8.hpp>

namespace ftopt::quant {

struct QatOptions {
  Granularity granularity = Granularity::PerChannel;
  Engine engine = Engine::Auto;
  /// PyTorch's default_qat_qconfig observes activations with a moving-average MinMax observer.
  ObserverOptions activations{.kind = ObserverKind::MovingAverageMinMax};
  /// Training micro-batches after which the observers stop (PyTorch's disable_observer);
  /// 0: never (freeze() stops them by hand).
  std::int64_t freeze_observers_after = 0;
  nn::NamePatterns keep_float;

  void validate() const {
    activations.validate();
    ftopt::detail::check(freeze_observers_after >= 0, "quant::QatOptions: freeze_observers_after must be >= 0, got ",
                         freeze_observers_after);
  }
};

/// What fake quantization keeps for one layer during training: its observers and how its
/// weight is quantized. FakeQuant<Layer> is the extension that runs it.
class FakeQuantized {
public:
  FakeQuantized(const QatOptions& options, bool reduce_range)
      : granularity_(options.granularity), freeze_after_(options.freeze_observers_after), reduce_(reduce_range),
        observed_{Observer(options.activations), Observer(options.activations)} {}
  virtual ~FakeQuantized() = default;

  bool frozen() const { return frozen_ || (freeze_after_ > 0 && batches_ >= freeze_after_); }
  void freeze() { frozen_ = true; }
  const Observer& input() const { return observed_.input; }
  const Observer& output() const { return observed_.output; }
  const ActivationObservers& observed() const { return observed_; }

  /// The weight fake-quantized as quantize_weight() quantizes it for the int8 model.
  at::Tensor fake_quantize_weight(const at::Tensor& weight) const {
    const at::Tensor w = weight.to(at::kFloat);
    const double eps = std::numeric_limits<float>::epsilon();
    if (granularity_ == Granularity::PerTensor) {
      const double amax = w.detach().abs().max().item<double>();
      return at::fake_quantize_per_tensor_affine(w, std::max(amax / 127.5, eps), 0, -128, 127);
    }
    const at::Tensor amax = std::get<0>(w.detach().flatten(1).abs().max(1));
    const at::Tensor scales = (amax / 127.5).clamp_min(eps);
    return at::fake_quantize_per_channel_affine(w, scales, at::zeros({w.size(0)}, at::kInt), 0, -128, 127);
  }

protected:
  /// The input fake-quantized, `compute` run on it, the output fake-quantized; observed while
  /// `training` and not frozen. In float32: autocast is off inside.
  template <class F>
  at::Tensor run(const at::Tensor& x, bool training, F&& compute) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const at::Tensor input = x.to(at::kFloat);
    const bool observing = training && !frozen();
    if (observing) observed_.input.observe(input);
    const at::Tensor y = compute(fake_quantize(input, observed_.input));
    if (observing) {
      observed_.output.observe(y);
      ++batches_;
    }
    return fake_quantize(y, observed_.output);
  }

private:
  at::Tensor fake_quantize(const at::Tensor& t, const Observer& observer) const {
    if (observer.batches() == 0) return t;  // evaluated before any training step: nothing to go by
    const auto [scale, zero_point] = observer.qparams(reduce_, "fake-quant");
    return at::fake_quantize_per_tensor_affine(t, scale, zero_point, 0, reduce_ ? 127 : 255);
  }

  Granularity granularity_;
  std::int64_t freeze_after_;
  bool reduce_;
  ActivationObservers observed_;
  std::int64_t batches_ = 0;
  bool frozen_ = false;
};

/// The fake-quantized forward of one nn::Linear or nn::Conv2d during training.
template <class Layer>
class FakeQuant : public nn::Extension<Layer>, public FakeQuantized {
public:
  using FakeQuantized::FakeQuantized;

  at::Tensor forward(Layer& layer, const at::Tensor& x) override {
    return run(x, layer.is_training(), [&](const at::Tensor& input) {
      return LayerOps<Layer>::with_weight(layer, input, fake_quantize_weight(layer.weight));
    });
  }
};

class Qat {
public:
  using axis = ftopt::axis::Quant;
  static constexpr const char* name = "qat";  ///< in grids, tables and flags
  static constexpr bool fake_quant_training = true;

  Qat() = default;
  explicit Qat(QatOptions options) : options_(std::move(options)) {}

  void validate() const { options_.validate(); }
  const QatOptions& options() const { return options_; }

  /// Fake-quantizes every quantizable Linear and Conv2d (Trainer::prepare calls this before
  /// training).
  void prepare(torch::nn::Module& module) {
    const bool reduce = reduce_range(select_engine(options_.engine));
    layers_.clear();
    left_float_.clear();
    detail::for_each_quantizable(module, options_.keep_float, [&]<class Layer>(const std::string& name, Layer* layer) {
      if (detail::keeps_float_extension(*layer)) {
        left_float_.push_back(name);
        return;
      }
      ftopt::detail::check(!layer->extension(), "quant::Qat: layer '", name,
                           "' carries another extension (a LoRA branch?); QAT fake-quantizes the layer's own "
                           "weight: keep it in float (keep_float) or train it fully");
      auto fake = std::make_shared<FakeQuant<Layer>>(options_, reduce);
      layer->attach(fake);
      layers_.emplace_back(name, fake);
    });
    ftopt::detail::check(!layers_.empty(), "quant::Qat: the model has no nn::Linear or nn::Conv2d to fake-quantize");
  }

  /// Stops every observer now (PyTorch: model.apply(torch.ao.quantization.disable_observer)).
  void freeze() {
    for (auto& [name, fake] : layers_) fake->freeze();
  }

  /// Replaces the fake-quantized layers with static int8 kernels using the trained ranges.
  void convert(torch::nn::Module& module) {
    ftopt::detail::check(!layers_.empty(), "quant::Qat::convert: prepare (Trainer::prepare) was not called");
    const at::QEngine engine = select_engine(options_.engine);
    const bool reduce = reduce_range(engine);
    std::map<std::string, std::shared_ptr<FakeQuantized>> trained(layers_.begin(), layers_.end());
    torch::NoGradGuard no_grad;
    detail::for_each_quantizable(module, options_.keep_float, [&]<class Layer>(const std::string& name, Layer* layer) {
      if (detail::keeps_float_extension(*layer)) return;
      auto found = trained.find(name);
      ftopt::detail::check(found != trained.end(), "quant::Qat::convert: layer '", name,
                           "' was not fake-quantized (was the model changed after prepare?)");
      layer->attach(detail::static_kernel(*layer, found->second->observed(), options_.granularity, reduce,
                                          "layer '" + name + "'", " (no training step reached it)"));
    });
  }

  /// The layers prepare left in float because they carry an adapter.
  const std::vector<std::string>& left_float() const { return left_float_; }

  /// The fake-quantized layers, by name, in module order.
  const std::vector<std::pair<std::string, std::shared_ptr<FakeQuantized>>>& layers() const { return layers_; }

private:
  QatOptions options_;
  std::vector<std::pair<std::string, std::shared_ptr<FakeQuantized>>> layers_;
  std::vector<std::string> left_float_;
};

static_assert(Policy<Qat>);

} // namespace ftopt::quant
