#pragma once
/// nn::apply_rotary: rotary position embeddings (Su et al. 2021, "RoFormer") as transformers'
/// apply_rotary_pos_emb writes them, x * cos + rotate_half(x) * sin with rotate_half(x) =
/// cat(-x2, x1) over the two halves of the last dimension.
///
/// On the CPU, for float32 and bf16 x, one kernel computes it, forward and backward, where the ops
/// as written are five passes forward (neg, cat, two products, a sum) and more backward. The
/// backward is the rotation by -angle: dx1 = g1 cos1 + g2 sin2, dx2 = g2 cos2 - g1 sin1. In bf16
/// every product and sum is rounded where an ATen bf16 op would round it, so the result is the
/// one the ops give, bit for bit; in float32 it may differ in the last bit (fused multiply-adds).
/// Other dtypes and devices, cos or sin needing a gradient, and `fused = false` run the ops.
///
///   at::Tensor q_rotated = ftopt::nn::apply_rotary(q, cos, sin);  // q [B, H, T, D], cos [T, D] or [B, 1, T, D]

#include <cstdint>
#include <type_traits>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <ftopt/detail/row_kernels.hpp>

namespace ftopt::nn {
namespace detail {

/// Where row (b, h, t) of x [B, H, T, D] and its cos and sin rows are (in elements).
struct RotaryLayout {
  std::int64_t heads, length, dim;              ///< H, T, D
  std::int64_t batch_stride, head_stride, time_stride;  ///< x's
  std::int64_t angle_batch_stride;              ///< cos's and sin's: 0 where they are [T, D]
};

/// Rows [begin, end) of B * H * T (b, h, t in that order): the rotation forward, or by -angle
/// (its backward) with Backward. T is float or the bits of bf16 (std::uint16_t); the output is
/// contiguous [B, H, T, D].
template <class T, bool Backward>
struct RotaryRows {
  [[gnu::always_inline]] static float in(T v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else return ftopt::detail::bf16_to_float(v);
  }
  /// What an ATen op of dtype T stores for v.
  [[gnu::always_inline]] static float kept(float v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else return ftopt::detail::round_bf16(v);
  }
  [[gnu::always_inline]] static T out(float v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else return ftopt::detail::float_to_bf16(v);
  }
  [[gnu::always_inline]] static void body(const T* x, T* y, const float* cos, const float* sin, RotaryLayout l,
                                          std::int64_t begin, std::int64_t end) {
    const std::int64_t half = l.dim / 2;
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t t = r % l.length, h = (r / l.length) % l.heads, b = r / (l.length * l.heads);
      const T* x1 = x + b * l.batch_stride + h * l.head_stride + t * l.time_stride;
      const T* x2 = x1 + half;
      T* y1 = y + r * l.dim;
      T* y2 = y1 + half;
      const float *c1 = cos + b * l.angle_batch_stride + t * l.dim, *c2 = c1 + half;
      const float *s1 = sin + b * l.angle_batch_stride + t * l.dim, *s2 = s1 + half;
      for (std::int64_t j = 0; j < half; ++j) {
        const float a = in(x1[j]), z = in(x2[j]);
        if constexpr (Backward) {
          y1[j] = out(kept(a * c1[j]) + kept(z * s2[j]));
          y2[j] = out(kept(z * c2[j]) - kept(a * s1[j]));
        } else {
          y1[j] = out(kept(a * c1[j]) - kept(z * s1[j]));
          y2[j] = out(kept(z * c2[j]) + kept(a * s2[j]));
        }
      }
    }
  }
};

/// The rotation of x (or by -angle, Backward) into a new contiguous [B, H, T, D] tensor.
template <bool Backward>
inline at::Tensor rotate(const at::Tensor& input, const at::Tensor& cos, const at::Tensor& sin, CpuIsa isa) {
  const at::Tensor x = input.stride(-1) == 1 ? input : input.contiguous();
  const RotaryLayout layout{x.size(1), x.size(2), x.size(3), x.stride(0), x.stride(1), x.stride(2),
                            cos.dim() == 4 ? cos.stride(0) : 0};
  at::Tensor y = at::empty(x.sizes(), x.options());
  const std::int64_t rows = x.size(0) * x.size(1) * x.size(2);
  const float *c = cos.data_ptr<float>(), *s = sin.data_ptr<float>();
  at::parallel_for(0, rows, std::max<std::int64_t>(1, 16384 / layout.dim), [&](std::int64_t begin, std::int64_t end) {
    if (x.scalar_type() == at::kFloat)
      ftopt::detail::run_on<RotaryRows<float, Backward>>(isa, x.data_ptr<float>(), y.data_ptr<float>(), c, s, layout,
                                                             begin, end);
    else
      ftopt::detail::run_on<RotaryRows<std::uint16_t, Backward>>(
          isa,
          reinterpret_cast<const std::uint16_t*>(x.data_ptr<at::BFloat16>()),
          reinterpret_cast<std::uint16_t*>(y.data_ptr<at::BFloat16>()), c, s, layout, begin, end);
  });
  return y;
}

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  /// cos and sin: float32, contiguous, [T, D] or [B, 1, T, D], already rounded to x's dtype.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin, std::int64_t isa) {
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["isa"] = isa;
    return rotate<false>(x, cos, sin, static_cast<CpuIsa>(isa));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto isa = static_cast<CpuIsa>(ctx->saved_data["isa"].toInt());
    return {rotate<true>(grads[0].contiguous(), saved[0], saved[1], isa), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

} // namespace detail

/// Whether nn::apply_rotary runs the kernel for these tensors.
inline bool rotary_fuses(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const bool angles = cos.dim() == 2 || (cos.dim() == 4 && cos.size(1) == 1 && cos.size(0) == x.size(0));
  return x.device().is_cpu() && x.dim() == 4 && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
         x.size(-1) % 2 == 0 && x.numel() > 0 && angles && cos.sizes() == sin.sizes() &&
         cos.size(-2) == x.size(2) && cos.size(-1) == x.size(3) && !cos.requires_grad() && !sin.requires_grad();
}

/// x * cos + rotate_half(x) * sin, cos and sin cast to x's dtype first (as transformers' Llama
/// does): x [B, H, T, D], cos and sin [T, D] or [B, 1, T, D]. `fused`: the kernel where it applies
/// (rotary_fuses), else the ops; `isa`: the kernel's copy (KernelOptions::isa).
inline at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool fused = true,
                               CpuIsa isa = CpuIsa::Widest) {
  if (fused && rotary_fuses(x, cos, sin))
    return detail::RotaryFunction::apply(x, cos.to(x.scalar_type()).to(at::kFloat).contiguous(),
                                         sin.to(x.scalar_type()).to(at::kFloat).contiguous(),
                                         static_cast<std::int64_t>(ftopt::detail::row_isa(isa)));
  const at::Tensor c = cos.to(x.scalar_type()), s = sin.to(x.scalar_type());
  const auto half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({x.narrow(-1, half, half).neg(), x.narrow(-1, 0, half)}, -1);
  return x * c + rotated * s;
}

} // namespace ftopt::nn
