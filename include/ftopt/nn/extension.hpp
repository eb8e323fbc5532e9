#pragma once
/// Extension<Layer>: what a Peft or Quant policy attaches to one of ftopt's drop-in layers to
/// change its forward (a LoRA branch, an int8 kernel, fake-quant). The layer calls
/// `extension->forward(layer, input)` instead of its own computation; the extension can still
/// call `layer.base_forward(input)`. Parameters an extension owns are registered on the layer
/// (e.g. "query.lora_A.weight"), so they live in the module tree by name.
///
///   struct Doubling : ftopt::nn::Extension<ftopt::nn::LinearImpl> {
///     torch::Tensor forward(ftopt::nn::LinearImpl& l, const torch::Tensor& x) override {
///       return 2 * l.base_forward(x);
///     }
///   };
///   linear->attach(std::make_shared<Doubling>());
///
/// A layer asks three things of what is attached: its forward, what that forward is beside the
/// layer's own (`effect`: what another policy may do with the layer), and, for layers that share
/// an input, whether the extension's kind computes them together (`together`).

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ftopt::nn {

/// What an extension's forward is beside its layer's own.
enum class Effect {
  none,      ///< exactly the layer's own, with nothing else done (a branch folded into the weight):
             ///< the layer may compute without it
  observes,  ///< the layer's own values, with a side effect (a calibration observer): it must run
  changes,   ///< other values, which folding into the weight or converting may take over (an
             ///< unfolded LoRA branch, an int8 kernel)
  stays,     ///< other values, for good (a bottleneck adapter): a converting policy leaves the
             ///< layer as it is
};

/// A kind of computation for several layers on one input (attention's query, key and value): the
/// layers' outputs, one per layer, where this kind computes the group, nullopt where it cannot
/// (the caller then runs each layer's own forward).
template <class Layer>
struct Together {
  virtual ~Together() = default;
  virtual std::optional<std::vector<at::Tensor>> forward(std::span<Layer* const> layers,
                                                         const at::Tensor& input) const = 0;
};

template <class Layer>
struct Extension {
  using layer_type = Layer;
  virtual ~Extension() = default;
  virtual at::Tensor forward(Layer& layer, const at::Tensor& input) = 0;
  virtual Effect effect() const { return Effect::changes; }
  /// The kind that computes this layer together with others on its input, or null (each layer
  /// alone). Layers group only where every extension that gives one gives the same kind (the
  /// same type): a typed key.
  virtual const Together<Layer>* together() const { return nullptr; }
};

/// The attach point a layer holds: empty unless a policy attached something. With nothing
/// attached the layer pays one pointer test per forward (benchmarks/layers.cpp measures it).
template <class Layer>
class Attachable {
public:
  void attach(std::shared_ptr<Extension<Layer>> extension) { extension_ = std::move(extension); }
  void detach() { extension_.reset(); }
  const std::shared_ptr<Extension<Layer>>& extension() const { return extension_; }
  /// The effect of what is attached (Effect::none with nothing).
  Effect effect() const { return extension_ ? extension_->effect() : Effect::none; }

protected:
  std::shared_ptr<Extension<Layer>> extension_;
};

} // namespace ftopt::nn
