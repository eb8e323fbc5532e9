#pragma once
/// precision::Fp16Mixed: the forward under fp16 autocast, fp32 master weights, and dynamic loss
/// scaling (GradScaler, PyTorch's defaults) so small fp16 gradients do not flush to zero. A step
/// whose gradients hold an inf or NaN is skipped and counted in EpochStats::skipped_steps; the
/// scale backs off. Needs CUDA: LibTorch 1.13's CPU autocast has no fp16, which the Trainer
/// reports when it is built (use Bf16Mixed on the CPU).
///
///   ftopt::Trainer<ftopt::precision::Fp16Mixed> trainer({}, {.scaler = {.growth_interval = 1000}});

#include <torch/cuda.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/error.hpp>
#include <ftopt/precision/concept.hpp>
#include <ftopt/detail/device_of.hpp>
#include <ftopt/precision/support/grad_scaler.hpp>

namespace ftopt::precision {

struct Fp16Mixed {
  using axis = ftopt::axis::Precision;
  static constexpr const char* name = "fp16";  ///< in grids, tables and flags
  static constexpr c10::ScalarType autocast_dtype = c10::ScalarType::Half;
  /// The Trainer lets the scaler skip steps with non-finite gradients instead of stopping.
  static constexpr bool skips_non_finite_steps = true;

  GradScalerOptions scaler;

  void validate() const {
    scaler.validate();
    ftopt::detail::check(compat::cpu_fp16_autocast || torch::cuda::is_available(),
                         "precision::Fp16Mixed: fp16 autocast needs a CUDA device, and none is available; "
                         "LibTorch ", compat::torch_major, ".", compat::torch_minor,
                         " has no fp16 autocast on the CPU: use precision::Bf16Mixed there");
  }

  void prepare(torch::nn::Module& module) {
    device_ = detail::device_of(module);
    ftopt::detail::check(device_ == c10::DeviceType::CUDA || compat::cpu_fp16_autocast,
                         "precision::Fp16Mixed: the model is on the CPU, where LibTorch ", compat::torch_major, ".",
                         compat::torch_minor, " has no fp16 autocast: use precision::Bf16Mixed, or train on CUDA");
    scaler_ = GradScaler(scaler);
  }
  [[nodiscard]] compat::AutocastScope forward_scope() const { return {device_, at::kHalf}; }
  torch::Tensor loss_input(const torch::Tensor& out) const { return out.to(at::kFloat); }
  void backward(const torch::Tensor& loss) { scaler_.scale(loss).backward(); }
  void unscale(torch::optim::Optimizer& optimizer) { scaler_.unscale(optimizer); }
  bool step(torch::optim::Optimizer& optimizer) { return scaler_.step(optimizer); }
  void update() { scaler_.update(); }

  void save_state(torch::serialize::OutputArchive& archive) const { scaler_.save_state(archive); }
  void load_state(torch::serialize::InputArchive& archive) { scaler_.load_state(archive); }

  GradScaler& grad_scaler() { return scaler_; }

private:
  c10::DeviceType device_ = c10::DeviceType::CUDA;
  GradScaler scaler_;
};

static_assert(Policy<Fp16Mixed>);

} // namespace ftopt::precision
