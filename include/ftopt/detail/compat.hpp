#pragma once
/// The one place that knows which LibTorch it is built against: 1.13 (Debian, CI) or 2.x (the
/// pip wheel on GPU machines). Nothing else in ftopt tests TORCH_VERSION.
///
///   ftopt::compat::AutocastScope scope(torch::kCPU, torch::kBFloat16);   // like torch.autocast
///   auto out = ftopt::compat::scaled_dot_product_attention(q, k, v);

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <ftopt/detail/batched_matmul.hpp>
#include <ftopt/kernel_options.hpp>
#include <ftopt/nn/dropout.hpp>

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

/// ftopt::AttentionKernel, where compat's attention reads it (KernelOptions::attention).
using AttentionKernel = ftopt::AttentionKernel;

/// Whether, under AttentionKernel::Auto, the written-out math beats ATen's fused CPU kernel
/// (flash attention) for these shapes. Measured on LibTorch 2.11: for bf16 and fp16 the fused CPU
/// backward is 1.5-4x slower than two GEMMs and a softmax at every length up to 1024 keys; for
/// fp32 the written-out math wins up to ~200 query and key rows and loses beyond. Longer
/// sequences stay fused, which also keeps no [L, S] attention matrix; on CUDA ATen's kernels
/// always win. bench_step_parts times the ViT's step against the fused kernel (docs/benchmarks.md,
/// "What ftopt does differently from eager Python").
inline bool attention_written_out_pays(const at::Tensor& q, const at::Tensor& k) {
  if (!q.device().is_cpu()) return false;
  const std::int64_t L = q.size(-2), S = k.size(-2);
  const bool low = q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
  return low ? S <= 1024 && L <= 1024 : L * S <= 200 * 200;
}

/// softmax(q k^T / sqrt(d) + mask) v written out: two batched products and a softmax, its
/// products through batched_matmul for small float32 matrices. For bf16 and fp16 scores the
/// softmax computes in float32: on LibTorch 2.x ATen's own softmax and its backward do (they
/// accumulate reduced floats in float and round once), on 1.13 it is an explicit fp32 island.
/// `batched_matmul`: the small products through detail::batched_matmul (KernelOptions).
inline at::Tensor attention_written_out(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const std::optional<at::Tensor>& mask, double dropout_p,
                                        bool is_causal, bool batched_matmul = true) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const std::int64_t L = q.size(-2), S = k.size(-2);
  const bool small_kernel = batched_matmul && ftopt::detail::batched_matmul_applies(q, k.transpose(-2, -1));
  const bool causal_in_product = is_causal && !mask && !small_kernel && q.dim() >= 3 &&
                                 q.sizes().slice(0, q.dim() - 2) == k.sizes().slice(0, k.dim() - 2);
  at::Tensor scores;
  if (causal_in_product) {
    // Causal, no other mask: the scale and the mask inside the product, scores = bias + scale q k^T
    // with bias -inf above the diagonal (one GEMM call where a product, a scaling and a masked_fill
    // were three passes over [L, S], and their backwards two more: softmax's gradient is already 0
    // where the weights are).
    const at::Tensor bias = at::zeros({L, S}, q.options()).masked_fill_(
        at::ones({L, S}, q.options().dtype(at::kBool)).triu(1), -std::numeric_limits<double>::infinity());
    auto shape = q.sizes().vec();
    shape.back() = S;
    scores = at::baddbmm(bias, q.reshape({-1, L, q.size(-1)}), k.reshape({-1, S, k.size(-1)}).transpose(1, 2), 1.0,
                         scale)
                 .view(shape);
  } else {
    scores = ftopt::detail::batched_matmul(q, k.transpose(-2, -1), batched_matmul).mul(scale);
  }
  if (is_causal && !causal_in_product) {
    auto allowed = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).tril();
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  }
  if (mask) {
    if (mask->scalar_type() == at::kBool)
      scores = scores.masked_fill(mask->logical_not(), -std::numeric_limits<double>::infinity());
    else
      scores = scores + *mask;
  }
#if FTOPT_TORCH_AT_LEAST(2, 0)
  at::Tensor weights = at::softmax(scores, -1);
#else
  const bool low = scores.scalar_type() == at::kBFloat16 || scores.scalar_type() == at::kHalf;
  at::Tensor weights = low ? at::softmax(scores, -1, at::kFloat).to(scores.scalar_type()) : at::softmax(scores, -1);
#endif
  if (dropout_p > 0.0) weights = ftopt::nn::dropout(weights, dropout_p, /*training=*/true);
  return ftopt::detail::batched_matmul(weights, v, batched_matmul);
}

/// softmax(q k^T / sqrt(d) + mask) v over the last two dims, with optional causal masking and
/// dropout on the attention weights. q: [..., L, d], k and v: [..., S, d]; a boolean mask is true
/// where attention is allowed, a float mask is added. On LibTorch >= 2.0 this is
/// at::scaled_dot_product_attention (flash / memory-efficient kernels where they apply) unless
/// the written-out math is measurably faster for these shapes (attention_written_out_pays:
/// short sequences on the CPU); on 1.13 it is always written out (the private 1.13 op changed its
/// signature in 2.0). `kernel` chooses otherwise (KernelOptions::attention, ::batched_matmul).
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v,
                                               const std::optional<at::Tensor>& mask = std::nullopt,
                                               double dropout_p = 0.0, bool is_causal = false,
                                               const KernelOptions& kernel = {}) {
#if FTOPT_TORCH_AT_LEAST(2, 0)
  const bool written_out = kernel.attention == AttentionKernel::WrittenOut ||
                           (kernel.attention == AttentionKernel::Auto && attention_written_out_pays(q, k));
  if (!written_out) return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal);
#endif
  return attention_written_out(q, k, v, mask, dropout_p, is_causal, kernel.batched_matmul);
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
