#pragma once
/// peft::LoraBranch: the low-rank branch peft::Lora attaches to one nn::Linear, with PEFT's
/// initialisations (`init_lora_weights`) and DoRA (`use_dora`), as peft/tuners/lora/layer.py and
/// dora.py (PEFT 0.21) define them:
///   LoRA:  y = W x + b + s B(A(dropout(x)))
///   DoRA:  y = m / ||W + s B A||_row (W x + s B A x) + b, the row norm detached from the graph
///          (DoRA paper, section 4.3); m, one magnitude per output row, starts at that norm and
///          trains. With dropout active, PEFT's form: W x + b + (m/n - 1) W x' + (m/n) s B A x',
///          x' = dropout(x). Without dropout on a frozen layer, LoRA and DoRA alike run as one
///          GEMM over their merged weight (peft's adapter kernel, kernel/adapter_linears.hpp).
/// Initialisations (B A is added to W at step 0, so each keeps the model's output):
///   Default   A Kaiming-uniform (a = sqrt(5)), B zero (PEFT's init_lora_weights = true)
///   Gaussian  A normal with std 1 / r, B zero
///   Pissa     W = U S V^T (thin SVD, float32): A = sqrt(S_r / s) V_r^T, B = U_r sqrt(S_r / s),
///             and the base keeps the residual W - s B A
///   Olora     W = Q R (reduced QR, float32): A = R[:r], B = Q[:, :r], base keeps W - s B A
/// A and B are registered on the layer as "lora_A" and "lora_B" and DoRA's m as
/// "lora_magnitude_vector", PEFT's file names for them.
///
/// peft::LoraConvBranch: the same on an nn::Conv2d, as PEFT's lora.Conv2d: A a convolution into
/// r channels with the base's kernel, stride, padding (and dilation), B a 1x1 convolution to the
/// base's output channels; y = conv(x) + s B(A(dropout(x))), merged as W + s (B A) over the
/// kernel. Default and Gaussian initialisations; no DoRA, PiSSA or OLoRA, no grouped base.

#include <cmath>
#include <cstdint>
#include <optional>

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/error.hpp>
#include <ftopt/nn/conv2d.hpp>
#include <ftopt/nn/dropout.hpp>
#include <ftopt/kernel_options.hpp>
#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/peft/kernel/adapted.hpp>
#include <ftopt/peft/support/targets.hpp>

namespace ftopt::peft {

/// PEFT's `init_lora_weights`: true (Default), "gaussian", "pissa", "olora".
enum class LoraInit { Default, Gaussian, Pissa, Olora };

/// What one branch is: LoraOptions' per-layer part.
struct LoraBranchOptions {
  std::int64_t r = 8;
  double scaling = 1;
  double dropout = 0;
  LoraInit init = LoraInit::Default;
  bool dora = false;
  KernelOptions kernel;
};

class LoraBranch : public Adapted {
public:
  LoraBranch(nn::LinearImpl& layer, const LoraBranchOptions& options)
      : Adapted(options.kernel),
        options_(options),
        a_(nn::Linear(torch::nn::LinearOptions(layer.options.in_features(), options.r).bias(false))),
        b_(nn::Linear(torch::nn::LinearOptions(options.r, layer.options.out_features()).bias(false))) {
    torch::NoGradGuard no_grad;
    initialize(layer);
    detail::adopt(layer, "lora_A", a_);
    detail::adopt(layer, "lora_B", b_);
    if (options_.dora) {
      // PEFT's DoraLinearLayer.update_layer: m = ||W + s B A||_row after the initialisation.
      magnitude_ = layer.register_parameter("lora_magnitude_vector", row_norm(layer.weight, delta()));
    }
  }

  /// As a kernel part, on a frozen layer: folded, the base alone; LoRA or DoRA without dropout,
  /// the base and the low-rank term (one GEMM over W + s B A, DoRA's rows rescaled); LoRA under
  /// dropout (or with KernelOptions::merged_weight off), the base with the branch's output added.
  /// DoRA under dropout runs in PEFT's form (own_forward).
  std::optional<Part> part(const nn::LinearImpl& layer) const override {
    if (layer.weight.requires_grad()) return std::nullopt;
    if (options_.dora && !merged_ && (!kernel().merged_weight || dropping(layer))) return std::nullopt;
    return branch_part(kernel::FrozenBase::dense(layer.weight), merged_, dropping(layer), [&] { return low_rank(); });
  }
  /// The branch as a low-rank term of the weight (for the adapter kernel over another base:
  /// peft::QuantizedBase).
  kernel::LowRank low_rank() const { return {a_->weight, b_->weight, options_.scaling, magnitude_}; }
  /// Whether dropout is active: the branch then sees dropped inputs, the base does not.
  bool dropping(const nn::LinearImpl& layer) const { return options_.dropout > 0 && layer.is_training(); }

  /// s B(A(dropout(x))), the term a LoRA branch adds to the layer's output. PEFT scales B's
  /// output; scaling the rank-r product before B is the same up to rounding and touches r values
  /// per token instead of out_features.
  at::Tensor added(nn::LinearImpl& layer, const at::Tensor& x) override {
    return b_(a_(dropped(layer, x)) * options_.scaling);
  }
  /// PEFT's forward: the layer's output plus the branch's, or DoRA's form.
  at::Tensor own_forward(nn::LinearImpl& layer, const at::Tensor& x) override {
    if (merged_) return layer.base_forward(x);
    if (!options_.dora) return layer.base_forward(x) + added(layer, x);
    return dora_forward(layer, x);
  }
  nn::Effect effect() const override { return merged_ ? nn::Effect::none : nn::Effect::changes; }

  /// s B A, the low-rank update of W.
  at::Tensor delta() const { return at::matmul(b_->weight, a_->weight) * options_.scaling; }

  /// Folds the branch into the layer's weight: W + s B A, and for DoRA (m / n) (W + s B A) with n
  /// the row norm before the fold (PEFT's DoraLinearVariant.merge_safe).
  void merge_into(nn::LinearImpl& layer) {
    if (merged_) return;
    torch::NoGradGuard no_grad;
    const at::Tensor update = delta().to(layer.weight.scalar_type());
    if (options_.dora) {
      norm_at_merge_ = row_norm(layer.weight, update);
      layer.weight.add_(update).mul_(dora_factor(norm_at_merge_));
    } else {
      layer.weight.add_(update);
    }
    merged_ = true;
  }
  /// Takes the branch back out of the weight (after merge_into).
  void unmerge_from(nn::LinearImpl& layer) {
    if (!merged_) return;
    torch::NoGradGuard no_grad;
    if (options_.dora) layer.weight.div_(dora_factor(norm_at_merge_));
    layer.weight.sub_(delta().to(layer.weight.scalar_type()));
    merged_ = false;
  }

  bool merged() const { return merged_; }
  const LoraBranchOptions& options() const { return options_; }
  nn::Linear& a() { return a_; }
  nn::Linear& b() { return b_; }
  /// DoRA's magnitude m (undefined without DoRA).
  const at::Tensor& magnitude() const { return magnitude_; }

private:
  /// A and B as `init` asks, in float32 on the CPU before they move to the layer; PiSSA and OLoRA
  /// factor W in float32 on its own device and leave W - (s B) A in the base, as PEFT computes it.
  void initialize(nn::LinearImpl& layer) {
    auto& a = a_->weight;
    auto& b = b_->weight;
    const std::int64_t r = options_.r;
    if (options_.init == LoraInit::Default || options_.init == LoraInit::Gaussian) {
      if (options_.init == LoraInit::Gaussian) a.normal_(0, 1.0 / static_cast<double>(r));
      else torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));
      b.zero_();
      return;
    }
    at::Tensor new_a, new_b;
    const at::Tensor w = layer.weight.to(at::kFloat);
    if (options_.init == LoraInit::Pissa) {
      const auto [u, s, vh] = at::linalg_svd(w, /*full_matrices=*/false);
      const at::Tensor root = (s.slice(0, 0, r) / options_.scaling).sqrt();
      new_a = root.unsqueeze(1) * vh.slice(0, 0, r);
      new_b = u.slice(1, 0, r) * root.unsqueeze(0);
    } else {  // Olora
      const auto [q, upper] = at::linalg_qr(w);
      new_a = upper.slice(0, 0, r).contiguous();
      new_b = q.slice(1, 0, r).contiguous();
    }
    layer.weight.copy_(w - at::matmul(new_b * options_.scaling, new_a));
    a.copy_(new_a);
    b.copy_(new_b);
  }

  at::Tensor dropped(const nn::LinearImpl& layer, const at::Tensor& x) const {
    return options_.dropout > 0 ? nn::dropout(x, options_.dropout, layer.is_training()) : x;
  }

  /// ||W + update||_2 over each output row, as the weight's dtype, detached.
  static at::Tensor row_norm(const at::Tensor& weight, const at::Tensor& update) {
    return at::linalg_vector_norm(weight.detach() + update.detach(), 2, {1}).to(weight.scalar_type());
  }
  /// m / n as a column, to scale W's rows.
  at::Tensor dora_factor(const at::Tensor& norm) const { return (magnitude_.detach() / norm).unsqueeze(1); }

  /// The result has the base layer's output dtype (bf16 under autocast, though m / n is float32),
  /// as PEFT's LoRA Linear casts its result back.
  at::Tensor dora_forward(nn::LinearImpl& layer, const at::Tensor& x) {
    const at::Tensor scale = magnitude_ / row_norm(layer.weight, delta().to(layer.weight.scalar_type()));
    if (options_.dropout > 0 && layer.is_training()) {
      const at::Tensor x_dropped = nn::dropout(x, options_.dropout, true);
      const at::Tensor base = layer.base_forward(x);
      const at::Tensor out = base + (scale - 1) * at::linear(x_dropped, layer.weight) +
                             scale * (b_(a_(x_dropped)) * options_.scaling);
      return out.to(base.scalar_type());
    }
    const at::Tensor own = at::linear(x, layer.weight);
    const at::Tensor out = scale * (own + b_(a_(x)) * options_.scaling);
    return (layer.bias.defined() ? out + layer.bias : out).to(own.scalar_type());
  }

  LoraBranchOptions options_;
  nn::Linear a_, b_;
  at::Tensor magnitude_, norm_at_merge_;
  bool merged_ = false;
};

class LoraConvBranch : public nn::Extension<nn::Conv2dImpl> {
public:
  LoraConvBranch(nn::Conv2dImpl& layer, const LoraBranchOptions& options, const std::string& name)
      : options_(options), a_(nullptr), b_(nullptr) {
    check(layer, options, name);
    const auto& base = layer.options;
    const auto& padding = compat::get<torch::ExpandingArray<2>>(base.padding());
    a_ = nn::Conv2d(torch::nn::Conv2dOptions(base.in_channels(), options.r, base.kernel_size())
                        .stride(base.stride()).padding(*padding).dilation(base.dilation()).bias(false));
    b_ = nn::Conv2d(torch::nn::Conv2dOptions(options.r, base.out_channels(), 1).bias(false));
    torch::NoGradGuard no_grad;
    if (options.init == LoraInit::Gaussian) a_->weight.normal_(0, 1.0 / static_cast<double>(options.r));
    else torch::nn::init::kaiming_uniform_(a_->weight, std::sqrt(5.0));
    b_->weight.zero_();
    for (auto [key, sub] : {std::pair{"lora_A", a_}, std::pair{"lora_B", b_}}) {
      sub->to(layer.weight.device(), layer.weight.scalar_type());
      layer.register_module(key, sub);
    }
  }

  /// What a convolution branch cannot do, checked before anything is attached.
  static void check(const nn::Conv2dImpl& layer, const LoraBranchOptions& options, const std::string& name) {
    ftopt::detail::check(layer.options.groups() == 1, "Lora: Conv2d layer '", name, "' has groups = ",
                         layer.options.groups(), "; LoRA adapts convolutions with groups = 1");
    ftopt::detail::check(!options.dora, "Lora: use_dora is not supported on Conv2d layer '", name,
                         "'; ftopt's DoRA adapts nn::Linear layers");
    ftopt::detail::check(options.init == LoraInit::Default || options.init == LoraInit::Gaussian,
                         "Lora: the PiSSA and OLoRA initialisations factor a matrix; Conv2d layer '", name,
                         "' takes the default or Gaussian one");
  }

  at::Tensor forward(nn::Conv2dImpl& layer, const at::Tensor& x) override {
    if (merged_) return layer.base_forward(x);
    const at::Tensor dropped = options_.dropout > 0 ? nn::dropout(x, options_.dropout, layer.is_training()) : x;
    return layer.base_forward(x) + b_(a_(dropped)) * options_.scaling;
  }

  /// s (B A) over the kernel: [out, in, kh, kw] (PEFT's get_delta_weight for Conv2d).
  at::Tensor delta() const {
    const auto& a = a_->weight;
    return at::matmul(b_->weight.flatten(1), a.flatten(1)).view({b_->weight.size(0), a.size(1), a.size(2), a.size(3)}) *
           options_.scaling;
  }
  void merge_into(nn::Conv2dImpl& layer) {
    if (merged_) return;
    torch::NoGradGuard no_grad;
    layer.weight.add_(delta().to(layer.weight.scalar_type()));
    merged_ = true;
  }
  void unmerge_from(nn::Conv2dImpl& layer) {
    if (!merged_) return;
    torch::NoGradGuard no_grad;
    layer.weight.sub_(delta().to(layer.weight.scalar_type()));
    merged_ = false;
  }

  bool merged() const { return merged_; }
  nn::Effect effect() const override { return merged_ ? nn::Effect::none : nn::Effect::changes; }
  nn::Conv2d& a() { return a_; }
  nn::Conv2d& b() { return b_; }

private:
  LoraBranchOptions options_;
  nn::Conv2d a_, b_;
  bool merged_ = false;
};

} // namespace ftopt::peft
