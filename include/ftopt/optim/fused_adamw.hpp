#pragma once
/// ftopt::optim::FusedAdamW: torch::optim::AdamW whose step() runs ATen's fused multi-tensor
/// kernel (at::_fused_adamw_, PyTorch's `AdamW(fused=True)`): one kernel per param group (per
/// device and dtype in it) instead of about eight per tensor. The options, the per-parameter
/// state and the serialized form are AdamW's (AdamWOptions, AdamWParamState), so param groups,
/// checkpoints and torch::save / torch::load work unchanged, in either direction. Where the kernel
/// is missing (LibTorch 1.13, the CPU before 2.4, other devices) or a tensor does not fit it
/// (not floating point, not contiguous, a grad of another dtype or device, sparse), step() is
/// AdamW's own.
///
///   ftopt::optim::FusedAdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));

#include <algorithm>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/adamw.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/detail/optimizer_closure.hpp>

namespace ftopt::optim {

class FusedAdamW : public torch::optim::AdamW {
public:
  using torch::optim::AdamW::AdamW;

  /// One AdamW step over every parameter that has a gradient. `closure`, when given, is called
  /// once under grad mode before the update and its loss is returned (as AdamW::step does).
  torch::Tensor step(LossClosure closure = nullptr) override {
    c10::NoGradGuard no_grad;
    const torch::Tensor loss = detail::evaluate_closure(closure);
    if (!fusable()) {
      torch::optim::AdamW::step();
      return loss;
    }
    for (auto& group : param_groups_) {
      const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
      std::vector<Launch> launches;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& state = state_of(p, options.amsgrad());
        state.step(state.step() + 1);  // before the kernel reads it, as AdamW and _fused_adam do
        if (p.numel() == 0) continue;  // nothing to update, and CUDA's kernel refuses it
        launch_for(launches, p).add(p, state, options.amsgrad());
      }
      for (auto& launch : launches) launch.run(options);
      fused_launches_ += static_cast<std::int64_t>(launches.size());
    }
    return loss;
  }

  /// How many at::_fused_adamw_ calls step() has made: one per param group and (device, dtype)
  /// in it per step; 0 while every step has been AdamW's own.
  std::int64_t fused_launches() const { return fused_launches_; }

private:
  /// One kernel call's lists: the parameters of one group on one device with one dtype.
  struct Launch {
    c10::Device device;
    at::ScalarType dtype;
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
    std::vector<float> steps;

    void add(const at::Tensor& p, torch::optim::AdamWParamState& state, bool amsgrad) {
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      if (amsgrad) max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
      steps.push_back(static_cast<float>(state.step()));
    }

    void run(const torch::optim::AdamWOptions& options) const {
      // The kernel reads each step as a float32 scalar on the params' device (CUDA's through a
      // float pointer): one host tensor of them, one copy (pinned, so it does not block), views.
      const auto n = static_cast<std::int64_t>(steps.size());
      at::Tensor host = at::empty({n}, at::TensorOptions().dtype(at::kFloat).pinned_memory(device.is_cuda()));
      std::copy(steps.begin(), steps.end(), host.data_ptr<float>());
      const at::Tensor on_device = device.is_cpu() ? host : host.to(device, /*non_blocking=*/true);
      const std::vector<at::Tensor> state_steps = on_device.unbind(0);
      compat::fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                           options.lr(), std::get<0>(options.betas()), std::get<1>(options.betas()),
                           options.weight_decay(), options.eps(), options.amsgrad());
    }
  };

  static Launch& launch_for(std::vector<Launch>& launches, const at::Tensor& p) {
    for (auto& launch : launches)
      if (launch.device == p.device() && launch.dtype == p.scalar_type()) return launch;
    launches.push_back(Launch{p.device(), p.scalar_type(), {}, {}, {}, {}, {}, {}});
    return launches.back();
  }

  /// p's state, created on first use as AdamW::step creates it (step 0, zero moments in p's
  /// layout; the running maximum only under amsgrad, and added if amsgrad was turned on later).
  torch::optim::AdamWParamState& state_of(const at::Tensor& p, bool amsgrad) {
    const auto key = compat::optimizer_state_key(p);
    if (state_.find(key) == state_.end()) {
      auto state = std::make_unique<torch::optim::AdamWParamState>();
      state->step(0);
      state->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
      state->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      if (amsgrad) state->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      state_[key] = std::move(state);
    }
    auto& state = static_cast<torch::optim::AdamWParamState&>(*state_[key]);
    if (amsgrad && !state.max_exp_avg_sq().defined())
      state.max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    return state;
  }

  /// A state tensor the kernel can update alongside p: same shape, dtype and device, contiguous.
  static bool fits(const at::Tensor& p, const at::Tensor& t) {
    return t.defined() && t.layout() == c10::kStrided && t.sizes() == p.sizes() &&
           t.scalar_type() == p.scalar_type() && t.device() == p.device() && t.is_contiguous();
  }

  /// Whether every parameter with a gradient, its gradient and its existing state fit the fused
  /// kernel (the kernels index all lists as dense row-major memory of one dtype and device).
  bool fusable() const {
    for (const auto& group : param_groups_) {
      const bool amsgrad = static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad();
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        if (!compat::has_fused_adamw(p.device().type()) || p.layout() != c10::kStrided ||
            !p.is_floating_point() || !p.is_contiguous() || !fits(p, p.grad()))
          return false;
        const auto found = state_.find(compat::optimizer_state_key(p));
        if (found == state_.end()) continue;
        const auto& state = static_cast<const torch::optim::AdamWParamState&>(*found->second);
        if (!fits(p, state.exp_avg()) || !fits(p, state.exp_avg_sq())) return false;
        if (amsgrad && state.max_exp_avg_sq().defined() && !fits(p, state.max_exp_avg_sq())) return false;
      }
    }
    return true;
  }

  std::int64_t fused_launches_ = 0;
};

} // namespace ftopt::optim
