#pragma once
/// peft::Lora: low-rank adapters (Hu et al. 2021) with the semantics and names of Hugging Face
/// PEFT's LoraConfig. Each target nn::Linear computes
///     y = W x + b + scaling * B(A(dropout(x))),   scaling = alpha / r  (rsLoRA: alpha / sqrt(r))
/// with A [r, in] Kaiming-uniform (a = sqrt(5)) and B [out, r] zero, so the model is unchanged at
/// step 0; only A and B train (plus biases or whole modules when asked). A and B are registered
/// on the layer as "lora_A" and "lora_B", so ".query.lora_A.weight" is in the state dict.
/// A target nn::Conv2d gets PEFT's convolution branch (A a convolution into r channels, B 1x1).
/// The variants PEFT spells as settings are settings here too: `dora` (use_dora), `init`
/// (init_lora_weights: gaussian, pissa, olora; see peft/support/lora_branch.hpp) and LoRA+
/// (`loraplus_lr_ratio`, through parameter_groups).
///
///   ftopt::Trainer<ftopt::precision::Bf16Mixed, ftopt::peft::Lora> trainer(
///       {}, {}, ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "value"},
///                                  .modules_to_save = {"classifier"}}));
///   ...
///   ftopt::peft::save_adapter(*model, trainer.peft(), "adapter/");   // PEFT's file names

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/optimizer.h>

#include <ftopt/error.hpp>
#include <ftopt/kernel_options.hpp>
#include <ftopt/nn/conv2d.hpp>
#include <ftopt/nn/layer_norm.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/concept.hpp>
#include <ftopt/peft/full.hpp>
#include <ftopt/peft/support/lora_branch.hpp>
#include <ftopt/peft/support/targets.hpp>

namespace ftopt::peft {

/// PEFT's `bias`: which biases train beside the adapters.
enum class LoraBias { None, All, LoraOnly };

namespace detail {
/// The names of the parameters that LayerNorm modules hold (transformers' ALL_LAYERNORM_LAYERS,
/// which LoRA+ keeps out of weight decay).
inline std::set<std::string> layer_norm_parameters(torch::nn::Module& module) {
  std::set<std::string> names;
  for (const auto& item : module.named_modules()) {
    const auto& m = *item.value();
    if (!m.as<torch::nn::LayerNormImpl>() && !m.as<nn::LayerNormImpl>()) continue;
    for (const auto& p : m.named_parameters(/*recurse=*/false))
      names.insert(item.key().empty() ? p.key() : item.key() + "." + p.key());
  }
  return names;
}
} // namespace detail

/// PEFT's LoraConfig, by its field names where they differ in the comments.
struct LoraOptions {
  std::int64_t r = 8;
  double alpha = 8;            ///< PEFT: lora_alpha
  double dropout = 0.0;        ///< PEFT: lora_dropout
  /// PEFT: target_modules (module names: "query", a dotted suffix, or nn::regex(...)).
  nn::NamePatterns targets = {"query", "value"};
  LoraBias bias = LoraBias::None;
  /// PEFT: modules_to_save; these train in full (e.g. a new classifier head).
  nn::NamePatterns modules_to_save;
  bool rslora = false;         ///< PEFT: use_rslora, scaling alpha / sqrt(r)
  bool dora = false;           ///< PEFT: use_dora
  LoraInit init = LoraInit::Default;  ///< PEFT: init_lora_weights
  /// LoRA+ (PEFT's create_loraplus_optimizer): B's learning rate over A's; 0 leaves one group.
  double loraplus_lr_ratio = 0;
  double loraplus_weight_decay = 0;  ///< LoRA+: the weight decay of its groups (PEFT's default 0)
  /// ftopt's kernels or PEFT's form (merged_weight: one GEMM over W + s B A; shared_input: query,
  /// key and value together).
  KernelOptions kernel;

  void validate() const {
    ftopt::detail::check(r > 0, "Lora: r must be > 0, got ", r);
    ftopt::detail::check(alpha > 0, "Lora: alpha must be > 0, got ", alpha);
    ftopt::detail::check(dropout >= 0 && dropout < 1, "Lora: dropout must be in [0, 1), got ", dropout);
    ftopt::detail::check(!targets.empty(), "Lora: targets is empty; name the Linear modules to adapt");
    ftopt::detail::check(loraplus_lr_ratio == 0 || loraplus_lr_ratio >= 1,
                         "Lora: loraplus_lr_ratio must be 0 (off) or >= 1 (B's lr over A's), got ",
                         loraplus_lr_ratio);
    ftopt::detail::check(loraplus_weight_decay >= 0, "Lora: loraplus_weight_decay must be >= 0, got ",
                         loraplus_weight_decay);
  }

  double scaling() const { return rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r); }
};

class Lora {
public:
  using axis = ftopt::axis::Peft;
  static constexpr const char* name = "lora";  ///< in grids, tables and flags

  Lora(LoraOptions options = {}) : options_(std::move(options)) {}  // NOLINT: implicit, for Lora({.r = 8})

  void validate() const { options_.validate(); }
  const LoraOptions& options() const { return options_; }

  /// Freezes the model, attaches a branch to every nn::Linear and nn::Conv2d whose name matches a
  /// target, and unfreezes the adapters, the biases `bias` asks for and `modules_to_save`. A rank
  /// above a target's smaller dimension (a convolution's input counts its kernel) is an error:
  /// B A could not use it.
  void attach(torch::nn::Module& module) {
    std::vector<std::pair<std::string, nn::LinearImpl*>> linears;
    std::vector<std::pair<std::string, nn::Conv2dImpl*>> convs;
    for (const auto& [name, found] : detail::target_modules(module, options_.targets, "Lora")) {
      if (auto* linear = found->as<nn::LinearImpl>()) {
        check_rank(name, linear->options.out_features(), linear->options.in_features());
        linears.emplace_back(name, linear);
      } else if (auto* conv = found->as<nn::Conv2dImpl>()) {
        const auto& k = *conv->options.kernel_size();
        check_rank(name, conv->options.out_channels(), conv->options.in_channels() * k[0] * k[1]);
        LoraConvBranch::check(*conv, branch_options(), name);
        convs.emplace_back(name, conv);
      } else {
        ftopt::detail::fail("Lora: target '", name, "' is not an ftopt::nn::Linear or nn::Conv2d; Lora adapts those");
      }
    }
    for (auto& p : module.parameters()) p.requires_grad_(false);
    branches_.clear();
    conv_branches_.clear();
    std::vector<torch::Tensor> adapters;
    for (auto& [name, linear] : linears) {
      auto branch = std::make_shared<LoraBranch>(*linear, branch_options());
      linear->attach(branch);
      branches_.emplace_back(name, branch);
      adapters.insert(adapters.end(), {branch->a()->weight, branch->b()->weight});
      if (options_.bias == LoraBias::LoraOnly && linear->bias.defined()) linear->bias.requires_grad_(true);
    }
    for (auto& [name, conv] : convs) {
      auto branch = std::make_shared<LoraConvBranch>(*conv, branch_options(), name);
      conv->attach(branch);
      conv_branches_.emplace_back(name, branch);
      adapters.insert(adapters.end(), {branch->a()->weight, branch->b()->weight});
      if (options_.bias == LoraBias::LoraOnly && conv->bias.defined()) conv->bias.requires_grad_(true);
    }
    if (options_.bias == LoraBias::All)
      for (auto& item : module.named_parameters())
        if (item.key().ends_with("bias")) item.value().requires_grad_(true);
    if (!options_.modules_to_save.empty())
      for (const auto& name : nn::parameters_under(module, options_.modules_to_save)) module.named_parameters()[name].requires_grad_(true);
    for (auto& adapter : adapters) adapter.requires_grad_(true);
  }

  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    return Full{}.trainable_parameters(module);
  }

  /// The optimizer's parameter groups, each with a copy of `defaults` (an options type such as
  /// torch::optim::AdamWOptions). One group without LoRA+. With loraplus_lr_ratio, the groups of
  /// PEFT's create_loraplus_optimizer: the matrices other than lora_B (lora_A, a kept head's
  /// weight) at defaults' lr; lora_B and every 1-D tensor (biases, DoRA's magnitudes, LayerNorms)
  /// at lr times the ratio; weight decay loraplus_weight_decay, but 0 for biases and LayerNorms.
  /// Empty groups are left out.
  template <class Options>
  std::vector<torch::optim::OptimizerParamGroup> parameter_groups(torch::nn::Module& module,
                                                                  const Options& defaults) const {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    auto add = [&](std::vector<torch::Tensor> params, double lr, std::optional<double> weight_decay) {
      if (params.empty()) return;
      auto options = std::make_unique<Options>(defaults);
      options->lr(lr);
      if constexpr (requires { options->weight_decay(0.0); })
        if (weight_decay) options->weight_decay(*weight_decay);
      groups.emplace_back(std::move(params), std::move(options));
    };
    if (options_.loraplus_lr_ratio == 0) {
      add(trainable_parameters(module), defaults.get_lr(), std::nullopt);
      return groups;
    }
    std::vector<torch::Tensor> a, b, b_no_decay;
    const auto layer_norms = detail::layer_norm_parameters(module);
    for (const auto& item : module.named_parameters()) {
      const std::string& name = item.key();
      const torch::Tensor& param = item.value();
      if (!param.requires_grad()) continue;
      if (name.find("lora_B") == std::string::npos && param.dim() != 1) a.push_back(param);
      else if (name.find("bias") != std::string::npos || layer_norms.contains(name)) b_no_decay.push_back(param);
      else b.push_back(param);
    }
    const double lr = defaults.get_lr(), decay = options_.loraplus_weight_decay;
    add(std::move(a), lr, decay);
    add(std::move(b), lr * options_.loraplus_lr_ratio, decay);
    add(std::move(b_no_decay), lr * options_.loraplus_lr_ratio, 0.0);
    return groups;
  }

  /// Folds every branch into its layer: W += scaling * B A (DoRA: W = m / ||W + s B A|| (W + s B A)).
  /// The forward then skips the branch; outputs are unchanged up to rounding.
  void merge(torch::nn::Module& module) {
    fold(module, /*merge=*/true);
  }
  /// Takes the branches back out of the weights (after merge).
  void unmerge(torch::nn::Module& module) {
    fold(module, /*merge=*/false);
  }

  /// The adapted Linear layers' names and branches, in module order.
  const std::vector<std::pair<std::string, std::shared_ptr<LoraBranch>>>& branches() const { return branches_; }
  /// The adapted Conv2d layers' names and branches, in module order.
  const std::vector<std::pair<std::string, std::shared_ptr<LoraConvBranch>>>& conv_branches() const {
    return conv_branches_;
  }

private:
  LoraBranchOptions branch_options() const {
    return {.r = options_.r, .scaling = options_.scaling(), .dropout = options_.dropout, .init = options_.init,
            .dora = options_.dora, .kernel = options_.kernel};
  }

  void check_rank(const std::string& name, std::int64_t out, std::int64_t in) const {
    const auto smaller = std::min(in, out);
    ftopt::detail::check(options_.r <= smaller, "Lora: r = ", options_.r, " is larger than layer '", name,
                         "' allows (", out, " x ", in, "); choose r <= ", smaller);
  }

  void fold(torch::nn::Module& module, bool merge) {
    detail::fold_branches(module, branches_, merge);
    detail::fold_branches(module, conv_branches_, merge);
  }

  LoraOptions options_;
  std::vector<std::pair<std::string, std::shared_ptr<LoraBranch>>> branches_;
  std::vector<std::pair<std::string, std::shared_ptr<LoraConvBranch>>> conv_branches_;
};

static_assert(Policy<Lora>);

} // namespace ftopt::peft
