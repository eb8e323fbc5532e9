#pragma once
/// nn::RmsNorm: root-mean-square layer norm (Zhang and Sennrich 2019) as transformers'
/// LlamaRMSNorm computes it: in float32 whatever the input's dtype,
///     y = weight * (x / sqrt(mean(x^2 over the last dimension) + eps)).to(x's dtype)
/// One parameter, "weight" (ones at first), as Hugging Face names it.
///
/// A float32 input with a float32 weight on the CPU (the residual stream of a Llama, also under
/// bf16 autocast) goes through one fused kernel, forward and backward (nn::rms_norm): one pass
/// over each row for the sum of squares and one for the output, where the ops written out are six
/// passes forward and a dozen backward. The backward computes, per row, with x^ = x * rstd,
///     dx = rstd * (g w - x^ * mean(g w x^)),   dweight = sum over rows of g x^,
/// the weight's sum in fixed blocks of rows, so it does not depend on the thread count. Other
/// dtypes and devices, and `fused = false`, run transformers' ops as written. The kernel has no
/// double backward.
///
///   ftopt::nn::RmsNorm norm(576, 1e-5);

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include <ftopt/detail/row_kernels.hpp>
#include <ftopt/error.hpp>

namespace ftopt::nn {
namespace detail {

using ftopt::detail::row_lanes;

/// rows [begin, end) of x [rows, n]: rstd[r] = 1 / sqrt(mean(x_r^2) + eps), y_r = w * (x_r * rstd[r]).
struct RmsNormForwardRows {
  [[gnu::always_inline]] static void body(const float* x, const float* w, float* y, float* rstd, std::int64_t begin,
                                          std::int64_t end, std::int64_t n, float eps) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      float lanes[row_lanes] = {};
      std::int64_t j = 0;
      for (; j + row_lanes <= n; j += row_lanes)
        for (int l = 0; l < row_lanes; ++l) lanes[l] += xr[j + l] * xr[j + l];
      float sum = 0;
      for (float lane : lanes) sum += lane;
      for (; j < n; ++j) sum += xr[j] * xr[j];
      const float inv = 1.0F / std::sqrt(sum / static_cast<float>(n) + eps);
      rstd[r] = inv;
      for (j = 0; j < n; ++j) yr[j] = w[j] * (xr[j] * inv);
    }
  }
};

/// rows [begin, end) of the backward: dx_r = rstd * (g w - x^ * mean(g w x^)), x^ = x_r * rstd;
/// with WithWeight, also dw += g x^ summed over these rows.
template <bool WithWeight>
struct RmsNormBackwardRows {
  [[gnu::always_inline]] static void body(const float* g, const float* x, const float* w, const float* rstd, float* dx,
                                          float* dw, std::int64_t begin, std::int64_t end, std::int64_t n) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float *gr = g + r * n, *xr = x + r * n;
      float* dxr = dx + r * n;
      const float inv = rstd[r];
      float lanes[row_lanes] = {};
      std::int64_t j = 0;
      for (; j + row_lanes <= n; j += row_lanes)
        for (int l = 0; l < row_lanes; ++l) lanes[l] += gr[j + l] * w[j + l] * xr[j + l];
      float sum = 0;
      for (float lane : lanes) sum += lane;
      for (; j < n; ++j) sum += gr[j] * w[j] * xr[j];
      const float mean = sum * inv / static_cast<float>(n);  // mean(g w x^)
      for (j = 0; j < n; ++j) {
        const float normalized = xr[j] * inv;
        dxr[j] = inv * (gr[j] * w[j] - normalized * mean);
        if constexpr (WithWeight) dw[j] += gr[j] * normalized;
      }
    }
  }
};

/// Rows per block of the weight's gradient: each block sums its rows into its own row of partial
/// sums, which are then added in order.
inline constexpr std::int64_t rms_norm_weight_rows = 32;

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            double eps, std::int64_t isa_code) {
    const auto isa = static_cast<CpuIsa>(isa_code);
    ctx->saved_data["isa"] = isa_code;
    const at::Tensor x = input.contiguous(), w = weight.contiguous();
    const std::int64_t n = x.size(-1), rows = x.numel() / n;
    at::Tensor y = at::empty_like(x);
    at::Tensor rstd = at::empty({rows}, x.options());
    const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
    float *yp = y.data_ptr<float>(), *rp = rstd.data_ptr<float>();
    at::parallel_for(0, rows, std::max<std::int64_t>(1, 32768 / n), [&](std::int64_t begin, std::int64_t end) {
      ftopt::detail::run_on<RmsNormForwardRows>(isa, xp, wp, yp, rp, begin, end, n, static_cast<float>(eps));
    });
    ctx->save_for_backward({x, w, rstd});
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const auto isa = static_cast<CpuIsa>(ctx->saved_data["isa"].toInt());
    const at::Tensor g = grads[0].to(at::kFloat).contiguous();
    const std::int64_t n = x.size(-1), rows = x.numel() / n;
    at::Tensor dx = at::empty_like(x);
    const float *gp = g.data_ptr<float>(), *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>(),
                *rp = rstd.data_ptr<float>();
    float* dxp = dx.data_ptr<float>();
    at::Tensor dw;
    if (ctx->needs_input_grad(1)) {
      const std::int64_t blocks = (rows + rms_norm_weight_rows - 1) / rms_norm_weight_rows;
      at::Tensor partial = at::zeros({blocks, n}, x.options());
      float* pp = partial.data_ptr<float>();
      at::parallel_for(0, blocks, 1, [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t b = first; b < last; ++b)
          ftopt::detail::run_on<RmsNormBackwardRows<true>>(isa, gp, xp, wp, rp, dxp, pp + b * n,
                                                               b * rms_norm_weight_rows,
                                                               std::min(rows, (b + 1) * rms_norm_weight_rows), n);
      });
      // The blocks' sums added in block order, column by column: the same on any thread count.
      dw = at::zeros({n}, x.options());
      float* dwp = dw.data_ptr<float>();
      at::parallel_for(0, n, 64, [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t b = 0; b < blocks; ++b)
          for (std::int64_t j = first; j < last; ++j) dwp[j] += pp[b * n + j];
      });
    } else {
      at::parallel_for(0, rows, std::max<std::int64_t>(1, 32768 / n), [&](std::int64_t begin, std::int64_t end) {
        ftopt::detail::run_on<RmsNormBackwardRows<false>>(isa, gp, xp, wp, rp, dxp, static_cast<float*>(nullptr),
                                                              begin, end, n);
      });
    }
    return {ctx->needs_input_grad(0) ? dx : at::Tensor(), dw, at::Tensor(), at::Tensor()};
  }
};

} // namespace detail

/// Whether nn::rms_norm runs the fused kernel for these tensors (float32 input and weight on the CPU).
inline bool rms_norm_fuses(const at::Tensor& x, const at::Tensor& weight) {
  return x.device().is_cpu() && weight.device().is_cpu() && x.scalar_type() == at::kFloat &&
         weight.scalar_type() == at::kFloat && x.numel() > 0 && weight.dim() == 1 && x.size(-1) == weight.size(0);
}

/// transformers' LlamaRMSNorm over the last dimension of x; `fused`: through the kernel where it
/// applies (rms_norm_fuses), else the ops as transformers writes them; `isa`: the kernel's copy
/// (KernelOptions::isa).
inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool fused = true,
                           CpuIsa isa = CpuIsa::Widest) {
  if (fused && rms_norm_fuses(x, weight))
    return detail::RmsNormFunction::apply(x, weight, eps, static_cast<std::int64_t>(ftopt::detail::row_isa(isa)));
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normalized = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normalized.to(x.scalar_type());
}

class RmsNormImpl : public torch::nn::Cloneable<RmsNormImpl> {
public:
  /// `fused`: nn::rms_norm's kernel where it applies (KernelOptions::row_kernels); `isa`: its copy;
  /// `unit_offset`: the scale is 1 + weight, the weight zeros at first (Gemma's RMSNorm).
  RmsNormImpl(std::int64_t size, double eps, bool fused = true, CpuIsa isa = CpuIsa::Widest, bool unit_offset = false)
      : size(size), eps(eps), fused(fused), isa(isa), unit_offset(unit_offset) {
    ftopt::detail::check(size >= 1 && eps >= 0, "nn::RmsNorm: size must be >= 1 and eps >= 0, got ", size, " and ", eps);
    reset();
  }
  void reset() override {
    weight = register_parameter("weight", unit_offset ? torch::zeros({size}) : torch::ones({size}));
  }

  torch::Tensor forward(const torch::Tensor& x) { return rms_norm(x, unit_offset ? weight + 1 : weight, eps, fused, isa); }

  std::int64_t size;
  double eps;
  bool fused;
  CpuIsa isa;
  bool unit_offset;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

} // namespace ftopt::nn
