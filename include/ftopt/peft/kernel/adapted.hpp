#pragma once
/// peft::Adapted: the base of every extension whose effect is an update of its layer's frozen
/// weight (peft::LoraBranch, peft::VeraBranch, peft::Ia3Scaling, peft::QuantizedBase). A method
/// says what it is as a kernel part (its frozen base, its update in the GEMM, or a term it adds
/// outside it) and its own form for what the kernel cannot compute; the adapter kernel
/// (kernel/adapter_linears.hpp) does the rest, alone or for layers that share an input:
///
///   policy (peft::Lora, ...)  ->  Adapted::part  ->  kernel::adapter_linears  ->  nn::Linear
///
///   struct Scaled : peft::Adapted {  // y = W (2 x) + b, as a column scaling of W
///     std::optional<peft::Part> part(const nn::LinearImpl& l) const override {
///       return peft::Part{peft::kernel::FrozenBase::dense(l.weight), peft::kernel::Columns{two}};
///     }
///     at::Tensor own_forward(nn::LinearImpl& l, const at::Tensor& x) override { return l.base_forward(2 * x); }
///   };

#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <ftopt/kernel_options.hpp>
#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/peft/kernel/adapter_linears.hpp>

namespace ftopt::peft {

/// An extension as a part of the adapter kernel: its layer's frozen base, its update computed in
/// the GEMM (none: a folded branch, or one the GEMM cannot take), and whether it adds a term of the
/// input outside it (a LoRA branch under dropout: Adapted::added).
struct Part {
  kernel::FrozenBase base;
  kernel::Term term;
  bool adds = false;
};

class Adapted : public nn::Extension<nn::LinearImpl> {
public:
  explicit Adapted(KernelOptions kernel = {}) : kernel_(kernel) {}

  /// The extension as a kernel part on `layer`, or nullopt where it runs in its own form (a base
  /// weight that trains, DoRA under dropout, KernelOptions::merged_weight off for a method whose
  /// own form is not a sum).
  virtual std::optional<Part> part(const nn::LinearImpl& layer) const = 0;
  /// The term a part that `adds` adds to its base's output, from the input as given.
  virtual at::Tensor added(nn::LinearImpl& /*layer*/, const at::Tensor& /*input*/) {
    throw std::logic_error("peft::Adapted::added called on an extension whose part adds nothing");
  }
  /// The method's own form, for where it is not a kernel part (PEFT's computation). A method
  /// whose part always exists (a packed base) has none.
  virtual at::Tensor own_forward(nn::LinearImpl& /*layer*/, const at::Tensor& /*input*/) {
    throw std::logic_error("peft::Adapted::own_forward called on an extension that is always a kernel part");
  }

  /// The kernel where it computes the layer (a part with an update, or a packed base), else the
  /// layer's own product plus the added term, else the method's own form.
  at::Tensor forward(nn::LinearImpl& layer, const at::Tensor& x) override;
  const nn::Together<nn::LinearImpl>* together() const override;
  const KernelOptions& kernel() const { return kernel_; }
  void set_kernel(KernelOptions kernel) { kernel_ = kernel; }

protected:
  /// The part of a branch that adds an update to `base`: the base alone once the branch is folded
  /// in; with `term()` in the GEMM where the kernel takes it (KernelOptions::merged_weight on and
  /// no dropout active); else with the branch's output added (added()).
  template <class MakeTerm>
  Part branch_part(kernel::FrozenBase base, bool folded, bool dropping, MakeTerm&& term) const {
    Part part{std::move(base), {}};
    if (folded) return part;
    if (kernel_.merged_weight && !dropping) part.term = term();
    else part.adds = true;
    return part;
  }

private:
  KernelOptions kernel_;
};

namespace kernel {

/// The part of a layer in a group: its extension's, or for a layer with nothing attached (or a
/// folded branch) its frozen weight alone. nullopt where the layer cannot join.
inline std::optional<Part> part_of(const nn::LinearImpl& layer) {
  const auto* adapted = dynamic_cast<const Adapted*>(layer.extension().get());
  if (adapted) return adapted->part(layer);
  if (layer.effect() != nn::Effect::none || layer.weight.requires_grad()) return std::nullopt;
  return Part{FrozenBase::dense(layer.weight), {}};
}

/// Adapted layers on one input (nn::Extension::together): one adapter_linears call over all of
/// them, then each added term on the input as cast for the GEMM.
struct Shared final : nn::Together<nn::LinearImpl> {
  std::optional<std::vector<at::Tensor>> forward(std::span<nn::LinearImpl* const> layers,
                                                 const at::Tensor& x) const override {
    std::vector<Layer> group;
    std::vector<std::int64_t> widths;
    std::vector<at::Tensor> biases;
    std::vector<bool> adds;
    bool computes = false;  // an update or a packed base: more than a plain stacked GEMM
    for (auto* layer : layers) {
      auto part = part_of(*layer);
      if (!part || std::holds_alternative<Columns>(part->term) ||
          layer->bias.defined() != layers[0]->bias.defined())
        return std::nullopt;
      computes = computes || part->adds || part->base.is_packed() || !std::holds_alternative<std::monostate>(part->term);
      group.push_back({part->base, part->term});
      adds.push_back(part->adds);
      widths.push_back(layer->options.out_features());
      if (layer->bias.defined()) biases.push_back(layer->bias);
    }
    if (!computes) return std::nullopt;  // nn::shared_input_linears' own stacked GEMM does it
    const at::Tensor input = nn::autocast_input(x);
    const at::Tensor bias = biases.empty() ? at::Tensor() : biases.size() == 1 ? biases[0] : at::cat(biases);
    const auto parts = adapter_linears(group, bias, input).split_with_sizes(widths, -1);
    std::vector<at::Tensor> out(parts.begin(), parts.end());
    for (std::size_t i = 0; i < layers.size(); ++i)
      if (adds[i]) out[i] = out[i] + dynamic_cast<Adapted&>(*layers[i]->extension()).added(*layers[i], input);
    return out;
  }
};

inline const Shared shared{};

} // namespace kernel

inline at::Tensor Adapted::forward(nn::LinearImpl& layer, const at::Tensor& x) {
  auto part = this->part(layer);
  if (!part) return own_forward(layer, x);
  const bool plain = std::holds_alternative<std::monostate>(part->term);
  if (plain && !part->base.is_packed()) {  // a float base's own product: the layer's
    const at::Tensor y = layer.base_forward(x);
    return part->adds ? y + added(layer, x) : y;
  }
  const at::Tensor input = nn::autocast_input(x);
  const std::vector<kernel::Layer> alone{{part->base, part->term}};
  const at::Tensor y = kernel::adapter_linears(alone, layer.bias, input);
  return part->adds ? y + added(layer, input) : y;
}

inline const nn::Together<nn::LinearImpl>* Adapted::together() const {
  return kernel_.shared_input ? &kernel::shared : nullptr;
}

/// Sets the kernel choices of every adapted layer under `module` (for a side-by-side comparison
/// on one model; a policy's options set them when it attaches).
inline void set_kernel(torch::nn::Module& module, KernelOptions kernel) {
  for (const auto& child : module.modules())
    if (auto* linear = dynamic_cast<nn::LinearImpl*>(child.get()))
      if (auto* adapted = dynamic_cast<Adapted*>(linear->extension().get())) adapted->set_kernel(kernel);
}

} // namespace ftopt::peft
