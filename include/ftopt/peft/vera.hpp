#pragma once
/// peft::Vera: VeRA (Kopiczko et al. 2024), vector-based random matrix adaptation, with the
/// semantics and names of Hugging Face PEFT's VeraConfig (peft/tuners/vera, PEFT 0.21). Two random
/// matrices, frozen and shared by every target, A [r, in_max] and B [out_max, r] (the largest
/// input and output sizes among the targets), and per target nn::Linear two trainable vectors,
/// d [r] and b [out]:
///     y = W x + bias + b * (B[:out] (d * (A[:, :in] dropout(x))))
/// d starts at d_initial (0.1) and b at zero, so the model is unchanged at step 0. A and B are
/// PEFT's Kaiming-uniform draws (bound sqrt(6 / fan_in)) from a CPU generator seeded with
/// projection_prng_key, A first: the same numbers as PEFT's for the same key. They are buffers of
/// the model itself ("vera_A", "vera_B", PEFT's file keys "base_model.vera_A" and ".vera_B"), so
/// they move with it; the vectors are registered on each layer as "vera_lambda_d" and
/// "vera_lambda_b", PEFT's names. A layer trains out + r values where LoRA trains r (in + out).
///
///   ftopt::peft::Vera vera({.r = 256, .targets = {"query", "value"}, .modules_to_save = {"classifier"}});

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/dropout.hpp>
#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/kernel_options.hpp>
#include <ftopt/peft/kernel/adapted.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/concept.hpp>
#include <ftopt/peft/full.hpp>
#include <ftopt/peft/support/targets.hpp>

namespace ftopt::peft {

/// The shared projections: A [r, in_max] and B [out_max, r], frozen.
struct VeraProjections {
  at::Tensor a, b;

  /// PEFT's VeraModel._init_vera_A_vera_B: Kaiming-uniform with gain sqrt(2) over each matrix's
  /// fan-in (its second size), A then B from one CPU generator seeded with `key`, in float32.
  static VeraProjections draw(std::int64_t r, std::int64_t in_max, std::int64_t out_max, std::uint64_t key) {
    at::Generator generator = at::detail::createCPUGenerator(key);
    auto kaiming = [&](std::int64_t rows, std::int64_t fan_in) {
      const double bound = std::sqrt(3.0) * std::sqrt(2.0) / std::sqrt(static_cast<double>(fan_in));
      return at::empty({rows, fan_in}, at::kFloat).uniform_(-bound, bound, generator);
    };
    VeraProjections out;
    out.a = kaiming(r, in_max);
    out.b = kaiming(out_max, r);
    return out;
  }
};

/// The two vectors VeRA trains on one nn::Linear, over the shared projections.
class VeraBranch : public Adapted {
public:
  VeraBranch(nn::LinearImpl& layer, const VeraProjections& shared, std::int64_t r, double d_initial, double dropout,
             KernelOptions kernel = {})
      : Adapted(kernel), shared_(shared), dropout_(dropout) {
    const auto options = layer.weight.options();
    lambda_d_ = layer.register_parameter("vera_lambda_d", at::full({r}, d_initial, options));
    lambda_b_ = layer.register_parameter("vera_lambda_b", at::zeros({layer.options.out_features()}, options));
    in_ = layer.options.in_features();
    out_ = layer.options.out_features();
  }

  /// As a kernel part, on a frozen layer: without dropout, the base and the branch as a low-rank
  /// term, a = d A[:, :in], b = b B[:out], scaling 1 (one GEMM over W + (b B)(d A); autograd
  /// carries the terms' gradients back to the vectors); under dropout (or with
  /// KernelOptions::merged_weight off), the base with the branch's output added.
  std::optional<Part> part(const nn::LinearImpl& layer) const override {
    if (layer.weight.requires_grad()) return std::nullopt;
    return branch_part(kernel::FrozenBase::dense(layer.weight), merged_, dropout_ > 0 && layer.is_training(), [&] {
      return kernel::LowRank{lambda_d_.unsqueeze(1) * a_slice(), lambda_b_.unsqueeze(1) * b_slice(), 1.0};
    });
  }
  nn::Effect effect() const override { return merged_ ? nn::Effect::none : nn::Effect::changes; }
  /// b * (B[:out] (d * (A[:, :in] dropout(x)))), PEFT's order of operations.
  at::Tensor added(nn::LinearImpl& layer, const at::Tensor& x) override {
    const at::Tensor dropped = dropout_ > 0 ? nn::dropout(x, dropout_, layer.is_training()) : x;
    return lambda_b_ * at::linear(lambda_d_ * at::linear(dropped, a_slice()), b_slice());
  }
  at::Tensor own_forward(nn::LinearImpl& layer, const at::Tensor& x) override {
    return merged_ ? layer.base_forward(x) : layer.base_forward(x) + added(layer, x);
  }

  /// (b B[:out]) (d A[:, :in]), the update of W ([out, in]).
  at::Tensor delta() const {
    return at::matmul(lambda_b_.unsqueeze(1) * b_slice(), lambda_d_.unsqueeze(1) * a_slice());
  }
  void merge_into(nn::LinearImpl& layer) {
    if (merged_) return;
    torch::NoGradGuard no_grad;
    layer.weight.add_(delta().to(layer.weight.scalar_type()));
    merged_ = true;
  }
  void unmerge_from(nn::LinearImpl& layer) {
    if (!merged_) return;
    torch::NoGradGuard no_grad;
    layer.weight.sub_(delta().to(layer.weight.scalar_type()));
    merged_ = false;
  }

  bool merged() const { return merged_; }
  const at::Tensor& lambda_d() const { return lambda_d_; }
  const at::Tensor& lambda_b() const { return lambda_b_; }

private:
  /// The shared matrices as this layer reads them, in the vectors' dtype: A's first `in` columns
  /// (a strided view, no copy in float32) and B's first `out` rows.
  at::Tensor a_slice() const { return shared_.a.narrow(1, 0, in_).to(lambda_d_.scalar_type()); }
  at::Tensor b_slice() const { return shared_.b.narrow(0, 0, out_).to(lambda_b_.scalar_type()); }

  VeraProjections shared_;  // handles to the model's buffers: they follow its moves
  double dropout_;
  std::int64_t in_ = 0, out_ = 0;
  at::Tensor lambda_d_, lambda_b_;
  bool merged_ = false;
};

/// PEFT's VeraConfig, by its field names where they differ in the comments.
struct VeraOptions {
  std::int64_t r = 256;
  /// PEFT: target_modules (module names, dotted suffixes, or nn::regex(...)).
  nn::NamePatterns targets = {"query", "value"};
  std::uint64_t projection_prng_key = 0;
  /// PEFT: save_projection; false leaves A and B out of the adapter file (a reader draws them
  /// again from projection_prng_key).
  bool save_projection = true;
  double dropout = 0.0;   ///< PEFT: vera_dropout
  double d_initial = 0.1;
  /// PEFT: modules_to_save; these train in full (e.g. a new classifier head).
  nn::NamePatterns modules_to_save;
  /// ftopt's kernels or PEFT's form (merged_weight: one GEMM over W + (b B)(d A)).
  KernelOptions kernel;

  void validate() const {
    ftopt::detail::check(r > 0, "Vera: r must be > 0, got ", r);
    ftopt::detail::check(dropout >= 0 && dropout < 1, "Vera: dropout must be in [0, 1), got ", dropout);
    ftopt::detail::check(std::isfinite(d_initial), "Vera: d_initial must be finite, got ", d_initial);
    ftopt::detail::check(!targets.empty(), "Vera: targets is empty; name the Linear modules to adapt");
  }
};

class Vera {
public:
  using axis = ftopt::axis::Peft;
  static constexpr const char* name = "vera";  ///< in grids, tables and flags

  Vera(VeraOptions options = {}) : options_(std::move(options)) {}  // NOLINT: implicit, for Vera({...})

  void validate() const { options_.validate(); }
  const VeraOptions& options() const { return options_; }

  /// Freezes the model, draws the shared projections for the largest target (registered on
  /// `module` as the buffers "vera_A" and "vera_B", on the first target's device and dtype),
  /// attaches a branch to every target nn::Linear and unfreezes the vectors and modules_to_save.
  void attach(torch::nn::Module& module) {
    const auto layers = detail::target_linears(module, options_.targets, "Vera");
    std::int64_t in_max = 0, out_max = 0;
    for (const auto& [name, linear] : layers) {
      in_max = std::max(in_max, linear->options.in_features());
      out_max = std::max(out_max, linear->options.out_features());
    }
    for (auto& p : module.parameters()) p.requires_grad_(false);
    const at::Tensor& like = layers.front().second->weight;
    VeraProjections drawn = VeraProjections::draw(options_.r, in_max, out_max, options_.projection_prng_key);
    projections_.a = module.register_buffer("vera_A", drawn.a.to(like.device(), like.scalar_type()));
    projections_.b = module.register_buffer("vera_B", drawn.b.to(like.device(), like.scalar_type()));
    branches_.clear();
    for (const auto& [name, linear] : layers) {
      auto branch = std::make_shared<VeraBranch>(*linear, projections_, options_.r, options_.d_initial, options_.dropout,
                                                   options_.kernel);
      linear->attach(branch);
      branches_.emplace_back(name, branch);
    }
    if (!options_.modules_to_save.empty())
      for (const auto& name : nn::parameters_under(module, options_.modules_to_save)) module.named_parameters()[name].requires_grad_(true);
  }

  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    return Full{}.trainable_parameters(module);
  }

  /// Folds every branch into its layer: W += (b B)(d A). Outputs are unchanged up to rounding.
  void merge(torch::nn::Module& module) { detail::fold_branches(module, branches_, /*merge=*/true); }
  /// Takes the branches back out of the weights (after merge).
  void unmerge(torch::nn::Module& module) { detail::fold_branches(module, branches_, /*merge=*/false); }

  /// The adapted layers' names and branches, in module order.
  const std::vector<std::pair<std::string, std::shared_ptr<VeraBranch>>>& branches() const { return branches_; }
  /// The shared A and B (undefined before attach).
  const VeraProjections& projections() const { return projections_; }

private:
  VeraOptions options_;
  VeraProjections projections_;
  std::vector<std::pair<std::string, std::shared_ptr<VeraBranch>>> branches_;
};

static_assert(Policy<Vera>);

} // namespace ftopt::peft
