#pragma once
/// quant::DynamicInt8: after training, every nn::Linear (but those kept in float) runs int8
/// weights with activations quantized on the fly, as torch.ao.quantization.quantize_dynamic
/// does with its default qconfig: weights symmetric qint8 from their min and max (per tensor,
/// or per output channel), activations per call from their own range, the kernels prepacked
/// (quantized::linear_prepack / quantized::linear_dynamic) on the best engine the build has.
///
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Lora, ftopt::memory::None,
///                  ftopt::parallel::Single, ftopt::quant::DynamicInt8> trainer(options, {}, lora, {}, {},
///       ftopt::quant::DynamicInt8({.keep_float = {"classifier"}}));
///   ...fit...
///   trainer.finalize(model);          // LoRA merged, then the Linears quantized
///   quant::save_int8(*model, "model.safetensors");   // quant/files/int8.hpp
///
/// Training is untouched (prepare does nothing); convert quantizes. Weights keep their float
/// values in the module (so the state dict and a later re-conversion still work); the int8
/// copies live in the attached kernels.

#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/quant/concept.hpp>
#include <ftopt/quant/support/engine.hpp>
#include <ftopt/quant/support/layers.hpp>

namespace ftopt::quant {

/// How weights are scaled: one scale for the whole matrix, or one per output row.
enum class Granularity { PerTensor, PerChannel };

struct DynamicInt8Options {
  /// torch.ao's default dynamic qconfig is per tensor; per channel is its per_channel_dynamic_qconfig.
  Granularity granularity = Granularity::PerTensor;
  Engine engine = Engine::Auto;
  /// Linears under these names stay in float (the seeds: attention and other sensitive layers).
  nn::NamePatterns keep_float;

  void validate() const {}
};

/// The symmetric qint8 weight PyTorch's MinMaxObserver / PerChannelMinMaxObserver make
/// (qscheme per_tensor_symmetric / per_channel_symmetric, quant_min -128, quant_max 127):
/// scale = max(|min|, |max|) / ((127 - -128) / 2), at least float epsilon; zero point 0.
inline at::Tensor quantize_weight(const at::Tensor& weight, Granularity granularity) {
  const at::Tensor w = weight.detach().to(at::kFloat).contiguous();
  const double eps = std::numeric_limits<float>::epsilon();
  if (granularity == Granularity::PerTensor) {
    const double amax = std::max(-w.min().item<double>(), w.max().item<double>());
    const double scale = std::max(std::max(amax, 0.0) / 127.5, eps);
    return at::quantize_per_tensor(w, scale, 0, at::kQInt8);
  }
  const at::Tensor rows = w.flatten(1);
  const at::Tensor amax = at::maximum(-std::get<0>(rows.min(1)), std::get<0>(rows.max(1))).clamp_min(0);
  const at::Tensor scales = (amax.to(at::kDouble) / 127.5).clamp_min(eps);
  return at::quantize_per_channel(w, scales, at::zeros({w.size(0)}, at::kLong), 0, at::kQInt8);
}

/// The int8 kernel attached to one nn::Linear.
class DynamicInt8Linear : public nn::Extension<nn::LinearImpl> {
public:
  DynamicInt8Linear(at::Tensor qweight, const c10::optional<at::Tensor>& bias, at::QEngine engine)
      : qweight_(std::move(qweight)), engine_(engine), packed_(prepack_linear(qweight_, bias)) {}

  at::Tensor forward(nn::LinearImpl&, const at::Tensor& input) override {
    const at::Tensor x = input.scalar_type() == at::kFloat ? input.contiguous() : input.to(at::kFloat).contiguous();
    return linear_dynamic(x, packed_, reduce_range(engine_));
  }

  const at::Tensor& qweight() const { return qweight_; }

private:
  at::Tensor qweight_;
  at::QEngine engine_;
  PackedLinear packed_;
};

class DynamicInt8 {
public:
  using axis = ftopt::axis::Quant;
  static constexpr const char* name = "dynamic-int8";  ///< in grids, tables and flags

  DynamicInt8() = default;
  explicit DynamicInt8(DynamicInt8Options options) : options_(std::move(options)) {}

  void validate() const { options_.validate(); }
  const DynamicInt8Options& options() const { return options_; }

  void prepare(torch::nn::Module&) {}

  /// Attaches an int8 kernel to each quantizable nn::Linear, replacing a merged LoRA branch. A
  /// layer with an adapter (an extension that cannot be merged) stays in float (left_float());
  /// one whose extension still changes its forward but could be merged (an unmerged LoRA
  /// branch) is an error: merge first (Trainer::finalize does), or keep the layer in float.
  void convert(torch::nn::Module& module) {
    const at::QEngine engine = select_engine(options_.engine);
    torch::NoGradGuard no_grad;
    quantized_.clear();
    left_float_.clear();
    for (auto& [name, linear] : detail::quantizable<nn::LinearImpl>(module, options_.keep_float)) {
      if (detail::keeps_float_extension(*linear)) {
        left_float_.push_back(name);
        continue;
      }
      ftopt::detail::check(detail::computes_own(*linear) ||
                               std::dynamic_pointer_cast<DynamicInt8Linear>(linear->extension()),
                           "quant::DynamicInt8: layer '", name,
                           "' carries another extension (an unmerged LoRA branch?); merge it before converting");
      linear->attach(std::make_shared<DynamicInt8Linear>(quantize_weight(linear->weight, options_.granularity),
                                                         detail::float_bias(*linear), engine));
      quantized_.push_back(name);
    }
    ftopt::detail::check(!quantized_.empty(), "quant::DynamicInt8: the model has no nn::Linear to quantize",
                         options_.keep_float.empty() ? "" : " outside keep_float");
  }

  /// The names of the layers the last convert quantized, in module order.
  const std::vector<std::string>& quantized() const { return quantized_; }
  /// The layers the last convert left in float because they carry an adapter (an extension
  /// that cannot be merged), in module order.
  const std::vector<std::string>& left_float() const { return left_float_; }

private:
  DynamicInt8Options options_;
  std::vector<std::string> quantized_, left_float_;
};

static_assert(Policy<DynamicInt8>);

} // namespace ftopt::quant
