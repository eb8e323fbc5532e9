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

#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ftopt::nn {

/// A trainable low-rank update of a layer's weight: the layer computes W x + scaling * B(A x),
/// with a [r, in] and b [out, r]. With a magnitude m [out] (DoRA) it computes
/// (m / n) (W + scaling * B A) x + bias instead, n the row norms of W + scaling * B A, detached.
struct LowRankTerm {
  at::Tensor a, b;
  double scaling = 1;
  at::Tensor magnitude;  ///< DoRA's m; undefined for a plain low-rank term
};

template <class Layer>
struct Extension {
  using layer_type = Layer;
  virtual ~Extension() = default;
  virtual at::Tensor forward(Layer& layer, const at::Tensor& input) = 0;
  /// False once the extension computes exactly the layer's own forward (a merged LoRA branch):
  /// another policy (quantization) may then replace it.
  virtual bool changes_forward() const { return true; }
  /// False for an extension that stays for inference and cannot be folded into the weight (a
  /// bottleneck adapter): quantization then leaves its layer in float instead of refusing it.
  virtual bool mergeable() const { return true; }
  /// True while the forward is exactly the layer's own with no side effect, so it may be skipped
  /// (a merged LoRA branch; not an observer, whose forward records what passes).
  virtual bool transparent() const { return false; }
  /// True while the forward is the layer's own plus a term of the input alone (an unmerged LoRA
  /// branch): `added(layer, input)` is that term, and the layer's own part may then be computed
  /// together with other layers' (nn::shared_input_linears).
  virtual bool additive() const { return false; }
  virtual at::Tensor added(Layer& /*layer*/, const at::Tensor& /*input*/) {
    throw std::logic_error("nn::Extension::added called on an extension that is not additive");
  }
  /// While the forward is the layer's own plus scaling * B(A x) of the input as given (an unmerged
  /// LoRA branch without dropout), or that sum's rows rescaled (DoRA without dropout), that term:
  /// the layer may then run as one GEMM over its merged weight (nn::low_rank_linears).
  virtual std::optional<LowRankTerm> low_rank(const Layer& /*layer*/) const { return std::nullopt; }
  /// The names, on its layer, of the buffers the extension keeps there that nothing changes after
  /// it attached them (a quantized frozen base's codes and scales): parallel::Ddp broadcasts them
  /// once, at setup, and not before each forward as it does other buffers. A name with no buffer
  /// behind it (NF4's double-quantization tensors on an int8 base) is passed over.
  virtual std::vector<std::string> constant_buffers() const { return {}; }
  /// True when the forward computes only with the input autocast would give the layer
  /// (nn::autocast_input; a quantized frozen base): given that input already cast, it computes
  /// the same, so layers sharing an input may cast it once for all (nn::shared_input_linears).
  virtual bool casts_input_first() const { return false; }
  /// Layers sharing an input whose extensions all give the same key here are computed together by
  /// one call of `forward_together` (a quantized base: one GEMM over the layers' dequantized
  /// weights, nn::shared_input_linears). Null, the default: each layer computes alone.
  virtual const void* together_key(const Layer& /*layer*/) const { return nullptr; }
  /// The outputs of `layers` side by side ([*, sum out_i]) from the input as autocast would give
  /// it; called only with layers whose extensions gave this one's key, and biases on all or none.
  virtual at::Tensor forward_together(std::span<Layer* const> /*layers*/, const at::Tensor& /*input*/) {
    throw std::logic_error("nn::Extension::forward_together called on an extension without a together_key");
  }
};

/// The attach point a layer holds: empty unless a policy attached something. With nothing
/// attached the layer pays one pointer test per forward (benchmarks/layers.cpp measures it).
template <class Layer>
class Attachable {
public:
  void attach(std::shared_ptr<Extension<Layer>> extension) { extension_ = std::move(extension); }
  void detach() { extension_.reset(); }
  const std::shared_ptr<Extension<Layer>>& extension() const { return extension_; }

protected:
  std::shared_ptr<Extension<Layer>> extension_;
};

} // namespace ftopt::nn
