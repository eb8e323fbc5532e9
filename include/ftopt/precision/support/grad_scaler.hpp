#pragma once
/// GradScaler: dynamic loss scaling with the semantics and defaults of torch.amp.GradScaler.
/// The loss is multiplied by `scale` before backward; before the optimizer step the gradients are
/// divided by it and checked; a step whose gradients hold an inf or NaN is skipped. Then
///   inf found:  scale *= backoff_factor, and the count of clean steps restarts;
///   otherwise:  after growth_interval clean steps in a row, scale *= growth_factor (if the
///               result is finite), and the count restarts.
/// On CUDA, and on the CPU from LibTorch 2.3, ATen's fused kernels do the work; elsewhere the
/// same arithmetic runs as tensor ops. Either way the scale stays on the device: the only host
/// read is the one PyTorch makes too, whether to take the step.
///
///   ftopt::precision::GradScaler scaler({.init_scale = 1024});
///   scaler.scale(loss).backward(); scaler.unscale(optimizer); clip...; scaler.step(optimizer);
///   scaler.update();

#include <cmath>
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/error.hpp>

namespace ftopt::precision {

/// torch.amp.GradScaler's settings and defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;  ///< 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;

  void validate() const {
    detail::check(init_scale > 0 && std::isfinite(init_scale), "GradScaler: init_scale must be finite and > 0, got ", init_scale);
    detail::check(growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ", growth_factor);
    detail::check(backoff_factor > 0.0 && backoff_factor < 1.0, "GradScaler: backoff_factor must be in (0, 1), got ",
                  backoff_factor);
    detail::check(growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got ", growth_interval);
  }
};

class GradScaler {
public:
  explicit GradScaler(GradScalerOptions options = {}) : options_(options) { options_.validate(); }

  /// loss * scale (the scale tensor is made on the loss's device on first use).
  at::Tensor scale(const at::Tensor& loss) {
    ensure_state(loss.device());
    return loss * scale_.to(loss.scalar_type());
  }

  /// Divides the gradients of the optimizer's parameters by the scale, noting any inf/NaN. Once
  /// per step; later calls before update() do nothing (as in PyTorch).
  void unscale(torch::optim::Optimizer& optimizer) {
    if (unscaled_ || !scale_.defined()) return;
    unscaled_ = true;
    std::vector<at::Tensor> grads;
    for (auto& group : optimizer.param_groups())
      for (auto& p : group.params())
        if (p.grad().defined()) grads.push_back(p.mutable_grad());
    found_inf_.zero_();
    if (grads.empty()) return;
    const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
    if (compat::has_fused_amp_kernels(scale_.device().type())) {
      at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
      return;
    }
    for (auto& g : grads) {
      found_inf_ = at::maximum(found_inf_, g.isfinite().logical_not().any().to(at::kFloat).view({1}));
      g.mul_(inv_scale);
    }
  }

  /// The optimizer step, unless the gradients held an inf or NaN. Returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer) {
    if (!scale_.defined()) {  // no scaled backward happened: nothing to check
      optimizer.step();
      return true;
    }
    unscale(optimizer);
    last_skipped_ = found_inf_.item<float>() != 0.0f;
    if (!last_skipped_) optimizer.step();
    return !last_skipped_;
  }

  /// The scale update for the next step (see the rule above).
  void update() {
    if (!scale_.defined()) return;
    unscaled_ = false;
    const auto& o = options_;
    if (compat::has_fused_amp_kernels(scale_.device().type())) {
      at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, o.growth_factor, o.backoff_factor, o.growth_interval);
      return;
    }
    const at::Tensor inf = found_inf_.gt(0);
    const at::Tensor successful = growth_tracker_ + 1;
    const at::Tensor grow = successful.eq(o.growth_interval);
    const at::Tensor grown = scale_ * o.growth_factor;
    const at::Tensor after_clean = at::where(grow.logical_and(grown.isfinite()), grown, scale_);
    scale_ = at::where(inf, scale_ * o.backoff_factor, after_clean);
    growth_tracker_ = at::where(inf.logical_or(grow), at::zeros_like(successful), successful);
  }

  /// The current scale (host read; for logs and tests).
  double current_scale() const { return scale_.defined() ? scale_.item<double>() : options_.init_scale; }
  /// Clean steps counted toward the next growth.
  std::int64_t growth_tracker() const { return growth_tracker_.defined() ? growth_tracker_.item<std::int64_t>() : 0; }
  /// Whether the last step() was skipped for an inf/NaN gradient.
  bool last_step_skipped() const { return last_skipped_; }
  const GradScalerOptions& options() const { return options_; }

  void save_state(torch::serialize::OutputArchive& archive) const {
    archive.write("scale", torch::tensor(current_scale()));
    archive.write("growth_tracker", torch::tensor(growth_tracker()));
  }
  void load_state(torch::serialize::InputArchive& archive) {
    at::Tensor scale, tracker;
    archive.read("scale", scale);
    archive.read("growth_tracker", tracker);
    const auto device = scale_.defined() ? scale_.device() : c10::Device(c10::kCPU);
    scale_ = scale.to(at::kFloat).view({1}).to(device);
    growth_tracker_ = tracker.to(at::kInt).view({1}).to(device);
    found_inf_ = at::zeros({1}, scale_.options());
  }

private:
  void ensure_state(c10::Device device) {
    if (scale_.defined()) {
      if (scale_.device() != device) {
        scale_ = scale_.to(device);
        growth_tracker_ = growth_tracker_.to(device);
        found_inf_ = found_inf_.to(device);
      }
      return;
    }
    scale_ = at::full({1}, options_.init_scale, at::TensorOptions().dtype(at::kFloat).device(device));
    growth_tracker_ = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));
    found_inf_ = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device));
  }

  GradScalerOptions options_;
  at::Tensor scale_, growth_tracker_, found_inf_;  ///< float[1], int32[1], float[1]: PyTorch's
  bool unscaled_ = false;
  bool last_skipped_ = false;
};

} // namespace ftopt::precision
