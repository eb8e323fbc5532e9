#pragma once
/// precision::Bf16Mixed: the forward under bf16 autocast (CPU or CUDA), master weights,
/// gradients and optimizer state in fp32, the loss computed in fp32. bf16 has fp32's exponent
/// range, so no loss scaling. fp32 islands: autocast's own fp32 list, plus ftopt's layers and
/// kernels that need it on LibTorch 1.13 (nn::LayerNorm, the softmax of attention).
///
///   ftopt::Trainer<ftopt::precision::Bf16Mixed> trainer;

#include <ftopt/detail/compat.hpp>
#include <ftopt/precision/concept.hpp>
#include <ftopt/precision/support/unscaled.hpp>
#include <ftopt/detail/device_of.hpp>

namespace ftopt::precision {

struct Bf16Mixed : Unscaled {
  using axis = ftopt::axis::Precision;
  static constexpr const char* name = "bf16";  ///< in grids, tables and flags
  static constexpr c10::ScalarType autocast_dtype = c10::ScalarType::BFloat16;

  void prepare(torch::nn::Module& module) { device_ = detail::device_of(module); }
  [[nodiscard]] compat::AutocastScope forward_scope() const { return {device_, at::kBFloat16}; }
  torch::Tensor loss_input(const torch::Tensor& out) const { return out.to(at::kFloat); }

private:
  c10::DeviceType device_ = c10::DeviceType::CPU;
};

static_assert(Policy<Bf16Mixed>);

} // namespace ftopt::precision
