#pragma once
/// Attention's core, softmax(q k^T / sqrt(d) + mask) v, for every model of ftopt (BERT, the ViT,
/// the decoders): ATen's fused kernel on LibTorch 2.x, or the product written out where that
/// measurably pays (short sequences on the CPU) and always on 1.13.
///
///   auto out = ftopt::nn::scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/false, kernel);

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include <ATen/ATen.h>

#include <ftopt/detail/batched_matmul.hpp>
#include <ftopt/detail/compat.hpp>
#include <ftopt/kernel_options.hpp>
#include <ftopt/nn/dropout.hpp>

namespace ftopt::nn {

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
  at::Tensor weights = compat::attention_softmax(scores);
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
  if constexpr (compat::has_fused_attention) {
    const bool written_out = kernel.attention == AttentionKernel::WrittenOut ||
                             (kernel.attention == AttentionKernel::Auto && attention_written_out_pays(q, k));
    if (!written_out) return compat::fused_attention(q, k, v, mask, dropout_p, is_causal);
  }
  return attention_written_out(q, k, v, mask, dropout_p, is_causal, kernel.batched_matmul);
}

} // namespace ftopt::nn
