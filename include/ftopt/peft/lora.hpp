#pragma once
/// peft::Lora: low-rank adapters (Hu et al. 2021) with the semantics and names of Hugging Face
/// PEFT's LoraConfig. Each target nn::Linear computes
///     y = W x + b + scaling * B(A(dropout(x))),   scaling = alpha / r  (rsLoRA: alpha / sqrt(r))
/// with A [r, in] Kaiming-uniform (a = sqrt(5)) and B [out, r] zero, so the model is unchanged at
/// step 0; only A and B train (plus biases or whole modules when asked). A and B are registered
/// on the layer as "lora_A" and "lora_B", so ".query.lora_A.weight" is in the state dict.
///
///   ftopt::Trainer<ftopt::precision::Bf16Mixed, ftopt::peft::Lora> trainer(
///       {}, {}, ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "value"},
///                                  .modules_to_save = {"classifier"}}));
///   ...
///   ftopt::peft::save_adapter(*model, trainer.peft(), "adapter/");   // PEFT's file names

#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/init.h>
#include <torch/nn/module.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/low_rank_linears.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/concept.hpp>
#include <ftopt/peft/full.hpp>
#include <ftopt/peft/support/targets.hpp>

namespace ftopt::peft {

/// PEFT's `bias`: which biases train beside the adapters.
enum class LoraBias { None, All, LoraOnly };

/// The branch attached to one nn::Linear.
class LoraBranch : public nn::Extension<nn::LinearImpl> {
public:
  LoraBranch(nn::LinearImpl& layer, std::int64_t r, double scaling, double dropout)
      : scaling_(scaling), dropout_(dropout),
        a_(nn::Linear(torch::nn::LinearOptions(layer.options.in_features(), r).bias(false))),
        b_(nn::Linear(torch::nn::LinearOptions(r, layer.options.out_features()).bias(false))) {
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(a_->weight, std::sqrt(5.0));  // PEFT's reset_lora_parameters
    b_->weight.zero_();
    detail::adopt(layer, "lora_A", a_);
    detail::adopt(layer, "lora_B", b_);
  }

  /// Unmerged and without dropout on a frozen layer, one GEMM over W + scaling * B A
  /// (nn::low_rank_linears); otherwise the layer's output plus the branch's.
  at::Tensor forward(nn::LinearImpl& layer, const at::Tensor& x) override {
    if (merged_) return layer.base_forward(x);
    const std::array<nn::LinearImpl*, 1> alone{&layer};
    if (auto group = nn::low_rank_group(alone)) return nn::low_rank_linears(*group, nn::autocast_input(x));
    return layer.base_forward(x) + added(layer, x);
  }

  /// scaling * B(A(dropout(x))), the term the branch adds to the layer's output. PEFT scales B's
  /// output; scaling the rank-r product before B is the same up to rounding and touches r values
  /// per token instead of out_features.
  bool additive() const override { return !merged_; }
  bool transparent() const override { return merged_; }
  at::Tensor added(nn::LinearImpl& layer, const at::Tensor& x) override {
    const at::Tensor dropped = dropout_ > 0 ? at::dropout(x, dropout_, layer.is_training()) : x;
    return b_(a_(dropped) * scaling_);
  }

  std::optional<nn::LowRankTerm> low_rank(const nn::LinearImpl& layer) const override {
    if (merged_ || (dropout_ > 0 && layer.is_training())) return std::nullopt;
    return nn::LowRankTerm{a_->weight, b_->weight, scaling_};
  }

  /// scaling * B A, the update merge adds to W.
  at::Tensor delta() const { return at::matmul(b_->weight, a_->weight) * scaling_; }
  bool merged() const { return merged_; }
  bool changes_forward() const override { return !merged_; }
  void set_merged(bool merged) { merged_ = merged; }
  nn::Linear& a() { return a_; }
  nn::Linear& b() { return b_; }

private:
  double scaling_, dropout_;
  nn::Linear a_, b_;
  bool merged_ = false;
};

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

  void validate() const {
    ftopt::detail::check(r > 0, "Lora: r must be > 0, got ", r);
    ftopt::detail::check(alpha > 0, "Lora: alpha must be > 0, got ", alpha);
    ftopt::detail::check(dropout >= 0 && dropout < 1, "Lora: dropout must be in [0, 1), got ", dropout);
    ftopt::detail::check(!targets.empty(), "Lora: targets is empty; name the Linear modules to adapt");
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

  /// Freezes the model, attaches a branch to every nn::Linear whose name matches a target,
  /// and unfreezes the adapters, the biases `bias` asks for and `modules_to_save`.
  void attach(torch::nn::Module& module) {
    const auto layers = detail::target_linears(module, options_.targets, "Lora");
    for (auto& p : module.parameters()) p.requires_grad_(false);
    branches_.clear();
    for (auto& [name, linear] : layers) {
      auto branch = std::make_shared<LoraBranch>(*linear, options_.r, options_.scaling(), options_.dropout);
      linear->attach(branch);
      branches_.emplace_back(name, branch);
      if (options_.bias == LoraBias::LoraOnly && linear->bias.defined()) linear->bias.requires_grad_(true);
    }
    if (options_.bias == LoraBias::All)
      for (auto& item : module.named_parameters())
        if (item.key().ends_with("bias")) item.value().requires_grad_(true);
    if (!options_.modules_to_save.empty())
      for (const auto& name : nn::parameters_under(module, options_.modules_to_save)) module.named_parameters()[name].requires_grad_(true);
    for (auto& [name, branch] : branches_) {
      branch->a()->weight.requires_grad_(true);
      branch->b()->weight.requires_grad_(true);
    }
  }

  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    return Full{}.trainable_parameters(module);
  }

  /// Folds every branch into its layer: W += scaling * B A. The forward then skips the branch;
  /// outputs are unchanged up to rounding.
  void merge(torch::nn::Module& module) { fold(module, +1); }
  /// Takes the branches back out of the weights (after merge).
  void unmerge(torch::nn::Module& module) { fold(module, -1); }

  /// The adapted layers' names and branches, in module order.
  const std::vector<std::pair<std::string, std::shared_ptr<LoraBranch>>>& branches() const { return branches_; }

private:
  void fold(torch::nn::Module& module, int sign) {
    torch::NoGradGuard no_grad;
    auto modules = module.named_modules("", false);
    for (auto& [name, branch] : branches_) {
      if (branch->merged() == (sign > 0)) continue;
      auto* linear = modules[name]->as<nn::LinearImpl>();
      linear->weight.add_(branch->delta().to(linear->weight.scalar_type()), sign);
      branch->set_merged(sign > 0);
    }
  }

  LoraOptions options_;
  std::vector<std::pair<std::string, std::shared_ptr<LoraBranch>>> branches_;
};

static_assert(Policy<Lora>);

} // namespace ftopt::peft
