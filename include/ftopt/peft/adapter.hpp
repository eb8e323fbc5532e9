#pragma once
/// peft::Adapter: bottleneck adapters (Houlsby et al. 2019) after the attention output and the
/// MLP output of each block: for each target nn::Linear,
///     y = dense(x);   y + up(activation(down(y)))
/// with down [hidden / reduction_factor, hidden] and up zero-initialized, so the model is
/// unchanged at step 0 and only the adapters train. The residual of the block is added after,
/// as in Houlsby's placement (before the block's own residual sum). Registered on the layer as
/// "adapter_down" and "adapter_up".
///
///   ftopt::peft::Adapter({.reduction_factor = 16})   // ViT: attention.output.dense, output.dense

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/init.h>
#include <torch/nn/module.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/concept.hpp>
#include <ftopt/peft/full.hpp>
#include <ftopt/peft/support/targets.hpp>

namespace ftopt::peft {

struct AdapterOptions {
  /// The bottleneck is out_features / reduction_factor wide (at least 1).
  std::int64_t reduction_factor = 16;
  /// The layers whose output gets an adapter; the default names the HF ViT / BERT attention
  /// output and MLP output projections, layer.N.attention.output.dense and layer.N.output.dense.
  nn::NamePatterns targets = {"output.dense"};
  /// Also train these in full (e.g. a new classifier head).
  nn::NamePatterns modules_to_save;

  void validate() const {
    ftopt::detail::check(reduction_factor >= 1, "Adapter: reduction_factor must be >= 1, got ", reduction_factor);
    ftopt::detail::check(!targets.empty(), "Adapter: targets is empty");
  }
};

/// The bottleneck attached to one nn::Linear.
class AdapterBranch : public nn::Extension<nn::LinearImpl> {
public:
  AdapterBranch(nn::LinearImpl& layer, std::int64_t reduction_factor) {
    const std::int64_t width = layer.options.out_features();
    const std::int64_t bottleneck = std::max<std::int64_t>(1, width / reduction_factor);
    down_ = detail::adopt(layer, "adapter_down", nn::Linear(width, bottleneck));
    up_ = detail::adopt(layer, "adapter_up", nn::Linear(bottleneck, width));
    torch::NoGradGuard no_grad;
    up_->weight.zero_();
    up_->bias.zero_();
  }

  at::Tensor forward(nn::LinearImpl& layer, const at::Tensor& x) override {
    at::Tensor y = layer.base_forward(x);
    return y + up_(at::gelu(down_(y)));
  }

  /// A bottleneck is non-linear: it stays a branch after training (quantization keeps its layer in float).
  nn::Effect effect() const override { return nn::Effect::stays; }

  nn::Linear& down() { return down_; }
  nn::Linear& up() { return up_; }

private:
  nn::Linear down_{nullptr}, up_{nullptr};
};

class Adapter {
public:
  using axis = ftopt::axis::Peft;
  static constexpr const char* name = "adapter";  ///< in grids, tables and flags

  Adapter(AdapterOptions options = {}) : options_(std::move(options)) {}  // NOLINT: implicit

  void validate() const { options_.validate(); }
  const AdapterOptions& options() const { return options_; }

  void attach(torch::nn::Module& module) {
    const auto layers = detail::target_linears(module, options_.targets, "Adapter");
    for (auto& p : module.parameters()) p.requires_grad_(false);
    if (!options_.modules_to_save.empty())
      for (const auto& name : nn::parameters_under(module, options_.modules_to_save))
        module.named_parameters()[name].requires_grad_(true);
    for (const auto& [name, linear] : layers) {
      auto branch = std::make_shared<AdapterBranch>(*linear, options_.reduction_factor);
      linear->attach(branch);
      for (auto& p : branch->down()->parameters()) p.requires_grad_(true);
      for (auto& p : branch->up()->parameters()) p.requires_grad_(true);
      ++count_;
    }
  }

  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    return Full{}.trainable_parameters(module);
  }

  /// Adapters are non-linear: there is nothing to fold into the base weights; they stay.
  void merge(torch::nn::Module&) {}

  /// How many layers got an adapter.
  std::size_t adapted() const { return count_; }

private:
  AdapterOptions options_;
  std::size_t count_ = 0;
};

static_assert(Policy<Adapter>);

} // namespace ftopt::peft
