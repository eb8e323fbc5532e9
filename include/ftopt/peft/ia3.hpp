#pragma once
/// peft::Ia3: (IA)^3 (Liu et al. 2022), learned scaling vectors, with the semantics and names of
/// Hugging Face PEFT's IA3Config (peft/tuners/ia3, PEFT 0.21). Each target nn::Linear gets a
/// vector l, registered on the layer as "ia3_l" (PEFT's file key "<target>.ia3_l"), starting at
/// ones so the model is unchanged:
///   a target:                 y = (W x + b) * l,  l [out, 1]  (keys and values: the output scaled)
///   a feedforward target:     y = W (x * l) + b,  l [1, in]   (the MLP's intermediate activations,
///                                                             scaled where the second Linear reads them)
/// Only the vectors train (and modules_to_save). merge folds l into W (and b for a plain target).
///
///   ftopt::peft::Ia3 ia3({.targets = {"key", "value", mlp_output}, .feedforward = {mlp_output},
///                         .modules_to_save = {"classifier"}});

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include <ftopt/error.hpp>
#include <ftopt/kernel_options.hpp>
#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/concept.hpp>
#include <ftopt/peft/full.hpp>
#include <ftopt/peft/kernel/adapted.hpp>
#include <ftopt/peft/support/targets.hpp>

namespace ftopt::peft {

/// The scaling vector attached to one nn::Linear.
class Ia3Scaling : public Adapted {
public:
  Ia3Scaling(nn::LinearImpl& layer, bool feedforward, KernelOptions kernel = {})
      : Adapted(kernel), feedforward_(feedforward) {
    const auto shape = feedforward ? std::vector<std::int64_t>{1, layer.options.in_features()}
                                   : std::vector<std::int64_t>{layer.options.out_features(), 1};
    scale_ = layer.register_parameter("ia3_l", torch::ones(shape, layer.weight.options()));
  }

  /// As a kernel part: folded, the base alone; a feedforward target on a frozen layer, the base and
  /// its column scaling (one GEMM over W diag(l): PEFT's gradients, its output up to the compute
  /// dtype's rounding). A plain target runs in PEFT's form.
  std::optional<Part> part(const nn::LinearImpl& layer) const override {
    if (layer.weight.requires_grad()) return std::nullopt;
    if (merged_) return Part{kernel::FrozenBase::dense(layer.weight), {}};
    if (!feedforward_ || !kernel().merged_weight) return std::nullopt;
    return Part{kernel::FrozenBase::dense(layer.weight), kernel::Columns{scale_}};
  }
  /// PEFT's IA3 Linear.forward: the input scaled for a feedforward target, else the output, the
  /// product taken in l's dtype and returned in the scaled tensor's (bf16 under autocast, not the
  /// float32 that the product alone would give).
  at::Tensor own_forward(nn::LinearImpl& layer, const at::Tensor& x) override {
    if (merged_) return layer.base_forward(x);
    const at::Tensor l = scale_.flatten();
    if (feedforward_) return layer.base_forward((x * l).to(x.scalar_type()));
    const at::Tensor y = layer.base_forward(x);
    return (y * l).to(y.scalar_type());
  }
  nn::Effect effect() const override { return merged_ ? nn::Effect::none : nn::Effect::changes; }

  /// W * l (a row per output for a plain target, a column per input for a feedforward one), and
  /// b * l for a plain target.
  void merge_into(nn::LinearImpl& layer) {
    if (merged_) return;
    torch::NoGradGuard no_grad;
    layer.weight.mul_(scale_.to(layer.weight.scalar_type()));
    if (!feedforward_ && layer.bias.defined()) layer.bias.mul_(scale_.flatten().to(layer.bias.scalar_type()));
    merged_ = true;
  }
  /// Divides l back out (exact unless an entry of l is 0, where PEFT adds 1e-8 and ftopt refuses).
  void unmerge_from(nn::LinearImpl& layer) {
    if (!merged_) return;
    torch::NoGradGuard no_grad;
    ftopt::detail::check(scale_.ne(0).all().item<bool>(), "Ia3: cannot unmerge a scaling vector with a zero entry");
    layer.weight.div_(scale_.to(layer.weight.scalar_type()));
    if (!feedforward_ && layer.bias.defined()) layer.bias.div_(scale_.flatten().to(layer.bias.scalar_type()));
    merged_ = false;
  }

  bool merged() const { return merged_; }
  bool feedforward() const { return feedforward_; }
  const at::Tensor& scale() const { return scale_; }

private:
  bool feedforward_;
  at::Tensor scale_;
  bool merged_ = false;
};

/// PEFT's IA3Config, by its field names where they differ in the comments.
struct Ia3Options {
  /// PEFT: target_modules (module names, dotted suffixes, or nn::regex(...)).
  nn::NamePatterns targets = {"key", "value"};
  /// PEFT: feedforward_modules, the targets whose input is scaled; each must match a target.
  nn::NamePatterns feedforward;
  /// PEFT: modules_to_save; these train in full (e.g. a new classifier head).
  nn::NamePatterns modules_to_save;
  /// ftopt's kernels or PEFT's form (merged_weight: a feedforward target as one GEMM over W diag(l)).
  KernelOptions kernel;

  void validate() const {
    ftopt::detail::check(!targets.empty(), "Ia3: targets is empty; name the Linear modules to scale");
  }
};

class Ia3 {
public:
  using axis = ftopt::axis::Peft;
  static constexpr const char* name = "ia3";  ///< in grids, tables and flags

  Ia3(Ia3Options options = {}) : options_(std::move(options)) {}  // NOLINT: implicit, for Ia3({...})

  void validate() const { options_.validate(); }
  const Ia3Options& options() const { return options_; }

  /// Freezes the model, attaches a scaling vector to every target nn::Linear, and unfreezes the
  /// vectors and modules_to_save. A feedforward pattern that matches no target is an error
  /// (PEFT: feedforward_modules must be a subset of target_modules).
  void attach(torch::nn::Module& module) {
    const auto layers = detail::target_linears(module, options_.targets, "Ia3");
    for (const auto& pattern : options_.feedforward) {
      bool found = false;
      for (const auto& [name, linear] : layers) found = found || pattern.matches(name);
      ftopt::detail::check(found, "Ia3: feedforward pattern '", pattern.text, "' matches none of the targets");
    }
    for (auto& p : module.parameters()) p.requires_grad_(false);
    scalings_.clear();
    for (const auto& [name, linear] : layers) {
      bool feedforward = false;
      for (const auto& pattern : options_.feedforward) feedforward = feedforward || pattern.matches(name);
      auto scaling = std::make_shared<Ia3Scaling>(*linear, feedforward, options_.kernel);
      linear->attach(scaling);
      scaling->scale().requires_grad_(true);
      scalings_.emplace_back(name, scaling);
    }
    if (!options_.modules_to_save.empty())
      for (const auto& name : nn::parameters_under(module, options_.modules_to_save)) module.named_parameters()[name].requires_grad_(true);
  }

  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    return Full{}.trainable_parameters(module);
  }

  /// Folds every vector into its layer's weights; outputs are unchanged up to rounding.
  void merge(torch::nn::Module& module) { detail::fold_branches(module, scalings_, /*merge=*/true); }
  /// Divides the vectors back out (after merge).
  void unmerge(torch::nn::Module& module) { detail::fold_branches(module, scalings_, /*merge=*/false); }

  /// The scaled layers' names and vectors, in module order.
  const std::vector<std::pair<std::string, std::shared_ptr<Ia3Scaling>>>& scalings() const { return scalings_; }

private:
  Ia3Options options_;
  std::vector<std::pair<std::string, std::shared_ptr<Ia3Scaling>>> scalings_;
};

static_assert(Policy<Ia3>);

} // namespace ftopt::peft
