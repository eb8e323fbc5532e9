#pragma once
/// The one place that knows which LibTorch it is built against: 1.13 (Debian, CI) or 2.x (the
/// pip wheel on GPU machines). Nothing else in ftopt tests TORCH_VERSION.
///
///   ftopt::compat::AutocastScope scope(torch::kCPU, torch::kBFloat16);   // like torch.autocast
///   auto out = ftopt::compat::attention_softmax(scores);

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>


#define FTOPT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace ftopt::compat {

/// LibTorch's version, as (major, minor).
inline constexpr int torch_major = TORCH_VERSION_MAJOR;
inline constexpr int torch_minor = TORCH_VERSION_MINOR;

/// Whether this build has ATen's fused loss-scaling kernels (_amp_foreach_non_finite_check_and_
/// unscale_, _amp_update_scale_) for a device: always on CUDA, on the CPU from LibTorch 2.3.
inline bool has_fused_amp_kernels(c10::DeviceType device) {
  if (device == c10::DeviceType::CUDA) return true;
#if FTOPT_TORCH_AT_LEAST(2, 3)
  return device == c10::DeviceType::CPU;
#else
  return false;
#endif
}

/// Whether this build has ATen's fused multi-tensor AdamW kernel (at::_fused_adamw_) for a
/// device: on CUDA from LibTorch 2.0, on the CPU from 2.4 (1.13 has neither).
inline bool has_fused_adamw(c10::DeviceType device) {
#if FTOPT_TORCH_AT_LEAST(2, 4)
  return device == c10::DeviceType::CUDA || device == c10::DeviceType::CPU;
#elif FTOPT_TORCH_AT_LEAST(2, 0)
  return device == c10::DeviceType::CUDA;
#else
  (void)device;
  return false;
#endif
}

/// One call of at::_fused_adamw_ (decoupled weight decay, no maximize, no grad scaling): updates
/// `params`, `exp_avgs`, `exp_avg_sqs` and, with `amsgrad`, `max_exp_avg_sqs` (else empty) in
/// place, reading each tensor's step from `state_steps` (float32 scalars on the params' device,
/// already incremented, as in torch/optim/adam.py's _fused_adam). All lists are as long as
/// `params`, and every tensor shares one device and dtype. Only where has_fused_adamw(device).
inline void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                         at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                         at::TensorList state_steps, double lr, double beta1, double beta2,
                         double weight_decay, double eps, bool amsgrad) {
#if FTOPT_TORCH_AT_LEAST(2, 0)
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                    beta2, weight_decay, eps, amsgrad, /*maximize=*/false);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)max_exp_avg_sqs;
  (void)state_steps, (void)lr, (void)beta1, (void)beta2, (void)weight_decay, (void)eps, (void)amsgrad;
  TORCH_CHECK(false, "fused_adamw_: LibTorch ", torch_major, ".", torch_minor,
              " has no at::_fused_adamw_ (check compat::has_fused_adamw first)");
#endif
}

/// Whether CPU autocast can cast to float16 in this build (LibTorch 2.4's per-device autocast API;
/// 1.13's CPU autocast is bf16-only).
inline constexpr bool cpu_fp16_autocast = FTOPT_TORCH_AT_LEAST(2, 4);

/// Whether autocast is on for a device type (CPU or CUDA).
inline bool autocast_enabled(c10::DeviceType device) {
#if FTOPT_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
#endif
}

/// The dtype autocast casts to on a device type.
inline at::ScalarType autocast_dtype(c10::DeviceType device) {
#if FTOPT_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

/// Whether the Trainer computes the loss inside the forward's autocast scope, as Lightning's
/// training_step does, so that a loss holding a layer (loss::fused_causal_lm's LM head) runs it in
/// the forward's precision: on LibTorch 2.x, whose autocast keeps losses, softmax and log_softmax
/// in float32. 1.13's CPU autocast runs log_softmax in bf16, so there the loss runs after the
/// scope closes, in float32 throughout.
inline constexpr bool loss_in_autocast = FTOPT_TORCH_AT_LEAST(2, 0);

/// Turns autocast on or off for a device type, casting to `dtype`.
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#if FTOPT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

/// RAII autocast, as Python's `with torch.autocast(device, dtype)`: saves the previous state,
/// enables autocast on this thread, and on exit restores the state and clears the cache of
/// cast weights when the outermost scope closes (so no stale low-precision copies outlive an
/// optimizer step). Autocast state is thread-local: open the scope on the forward's thread.
class AutocastScope {
public:
  AutocastScope(c10::DeviceType device, at::ScalarType dtype, bool enabled = true)
      : device_(device), was_enabled_(autocast_enabled(device)), was_dtype_(autocast_dtype(device)) {
    set_autocast(device, enabled, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast(device_, was_enabled_, was_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

private:
  c10::DeviceType device_;
  bool was_enabled_;
  at::ScalarType was_dtype_;
};

/// Whether this LibTorch has at::scaled_dot_product_attention (2.0 on; the private 1.13 op
/// changed its signature in 2.0).
inline constexpr bool has_fused_attention = FTOPT_TORCH_AT_LEAST(2, 0);

/// at::scaled_dot_product_attention where this LibTorch has it (has_fused_attention); an error on 1.13.
inline at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal) {
#if FTOPT_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal);
#else
  (void)q, (void)k, (void)v, (void)mask, (void)dropout_p, (void)is_causal;
  throw std::logic_error("compat::fused_attention: LibTorch 1.13 has no scaled_dot_product_attention");
#endif
}

/// Softmax over the last dim of attention scores, in float32 for bf16 and fp16: on LibTorch 2.x
/// ATen's own softmax and its backward do (they accumulate reduced floats in float and round
/// once); on 1.13 it is an explicit float32 island.
inline at::Tensor attention_softmax(const at::Tensor& scores) {
#if FTOPT_TORCH_AT_LEAST(2, 0)
  return at::softmax(scores, -1);
#else
  const bool low = scores.scalar_type() == at::kBFloat16 || scores.scalar_type() == at::kHalf;
  return low ? at::softmax(scores, -1, at::kFloat).to(scores.scalar_type()) : at::softmax(scores, -1);
#endif
}

/// The key under which torch::optim::Optimizer::state() files a parameter's state: the address
/// of its TensorImpl, as text on 1.13 (c10::guts::to_string, since removed) and as a pointer on 2.x.
template <class Key = typename std::remove_cvref_t<
              decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type>
Key optimizer_state_key(const at::Tensor& parameter) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << parameter.unsafeGetTensorImpl();
    return text.str();
  } else {
    return static_cast<Key>(parameter.unsafeGetTensorImpl());
  }
}

/// Variant access for LibTorch's option variants: c10::variant on 1.13, std::variant on 2.x.
/// Argument-dependent lookup picks the right holds_alternative / get for either.
template <class T, class Variant>
bool holds(const Variant& v) {
  using std::holds_alternative;
  return holds_alternative<T>(v);
}
template <class T, class Variant>
const T& get(const Variant& v) {
  using std::get;
  return get<T>(v);
}

} // namespace ftopt::compat
