#pragma once
/// nn::add_layer_norm: a pre-norm transformer's residual sum and the LayerNorm after it, in one
/// pass over the rows forward and one backward,
///     sum = branch + stream,   normed = layer_norm(sum) * weight + bias,
/// with `normed` written in the dtype its consumer computes in (bf16 where the next Linears run
/// under autocast: the cast folded in). Where ATen runs an add, native_layer_norm, a cast, and
/// backward the cast's, native_layer_norm_backward and autograd's sum of the stream's two
/// gradients, the kernel reads each row once per direction:
///     dsum = rstd (g w - mean(g w) - x^ mean(g w x^)) + dsum_direct,   x^ = (sum - mean) rstd,
///     dweight = sum over rows of g x^,   dbias = sum over rows of g,
/// the parameters' sums in fixed blocks of rows, so they do not depend on the thread count.
///
/// It runs on the CPU for a float32 stream, a float32 or bf16 branch (autocast's Linear output),
/// float32 weight and bias: the branch is added in float32 (as `branch.to(float32) + stream`), the
/// mean and variance (biased, as torch's) are taken in float32 over the row in two passes. Other
/// devices and dtypes, and `fused = false`, run the ops. No double backward.
///
///   auto [h, normed] = ftopt::nn::add_layer_norm(attention_out, x, norm->weight, norm->bias, 1e-12, at::kBFloat16);

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <ftopt/detail/row_kernels.hpp>
#include <ftopt/detail/row_tensors.hpp>
#include <ftopt/kernel_options.hpp>

namespace ftopt::nn {
namespace detail {

using ftopt::detail::data_of;
using ftopt::detail::load_float;
using ftopt::detail::on_float_or_bf16;
using ftopt::detail::row_grain;
using ftopt::detail::row_lanes;
using ftopt::detail::store_float;
using ftopt::detail::sum_blocks_in_order;

/// rows [begin, end): s = branch + stream, its mean and rstd, y = (s - mean) rstd w + b.
template <class Branch, class Out>
struct AddLayerNormForwardRows {
  [[gnu::always_inline]] static void body(const Branch* branch, const float* stream, const float* w, const float* b,
                                          float* sum, Out* y, float* mean, float* rstd, std::int64_t begin,
                                          std::int64_t end, std::int64_t n, float eps) {
    for (std::int64_t r = begin; r < end; ++r) {
      const Branch* br = branch + r * n;
      const float* st = stream + r * n;
      float* sr = sum + r * n;
      Out* yr = y + r * n;
      float lanes[row_lanes] = {};
      std::int64_t j = 0;
      for (; j + row_lanes <= n; j += row_lanes)
        for (int l = 0; l < row_lanes; ++l) {
          const float s = load_float(br, j + l) + st[j + l];
          sr[j + l] = s;
          lanes[l] += s;
        }
      float total = 0;
      for (float lane : lanes) total += lane;
      for (; j < n; ++j) {
        const float s = load_float(br, j) + st[j];
        sr[j] = s;
        total += s;
      }
      const float mu = total / static_cast<float>(n);
      float squares[row_lanes] = {};
      for (j = 0; j + row_lanes <= n; j += row_lanes)
        for (int l = 0; l < row_lanes; ++l) squares[l] += (sr[j + l] - mu) * (sr[j + l] - mu);
      float variance = 0;
      for (float lane : squares) variance += lane;
      for (; j < n; ++j) variance += (sr[j] - mu) * (sr[j] - mu);
      const float inv = 1.0F / std::sqrt(variance / static_cast<float>(n) + eps);
      mean[r] = mu;
      rstd[r] = inv;
      for (j = 0; j < n; ++j) store_float(yr, j, (sr[j] - mu) * inv * w[j] + b[j]);
    }
  }
};

/// rows [begin, end) of the backward: dsum = rstd (g w - mean(g w) - x^ mean(g w x^)) + direct
/// (WithDirect); with WithParams, dw += g x^ and db += g over these rows.
template <class Out, bool WithDirect, bool WithParams>
struct AddLayerNormBackwardRows {
  [[gnu::always_inline]] static void body(const Out* g, const float* direct, const float* sum, const float* w,
                                          const float* mean, const float* rstd, float* dsum, float* dw, float* db,
                                          std::int64_t begin, std::int64_t end, std::int64_t n) {
    for (std::int64_t r = begin; r < end; ++r) {
      const Out* gr = g + r * n;
      const float* sr = sum + r * n;
      float* dr = dsum + r * n;
      const float mu = mean[r], inv = rstd[r];
      float gw_lanes[row_lanes] = {}, gwx_lanes[row_lanes] = {};
      std::int64_t j = 0;
      for (; j + row_lanes <= n; j += row_lanes)
        for (int l = 0; l < row_lanes; ++l) {
          const float gw = load_float(gr, j + l) * w[j + l];
          gw_lanes[l] += gw;
          gwx_lanes[l] += gw * (sr[j + l] - mu);
        }
      float gw_total = 0, gwx_total = 0;
      for (int l = 0; l < row_lanes; ++l) {
        gw_total += gw_lanes[l];
        gwx_total += gwx_lanes[l];
      }
      for (; j < n; ++j) {
        const float gw = load_float(gr, j) * w[j];
        gw_total += gw;
        gwx_total += gw * (sr[j] - mu);
      }
      const float gw_mean = gw_total / static_cast<float>(n);
      const float gwx_mean = gwx_total * inv / static_cast<float>(n);  // mean(g w x^)
      for (j = 0; j < n; ++j) {
        const float normalized = (sr[j] - mu) * inv;
        const float gj = load_float(gr, j);
        float d = inv * (gj * w[j] - gw_mean - normalized * gwx_mean);
        if constexpr (WithDirect) d += direct[r * n + j];
        dr[j] = d;
        if constexpr (WithParams) {
          dw[j] += gj * normalized;
          db[j] += gj;
        }
      }
    }
  }
};

/// Rows per block of the weight's and bias's gradients.
inline constexpr std::int64_t add_layer_norm_param_rows = 32;

struct AddLayerNormFunction : torch::autograd::Function<AddLayerNormFunction> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& branch,
                                              const at::Tensor& stream, const at::Tensor& weight,
                                              const at::Tensor& bias, double eps, std::int64_t out_code,
                                              std::int64_t isa_code) {
    const auto isa = static_cast<CpuIsa>(isa_code);
    const auto out_type = static_cast<at::ScalarType>(out_code);
    const at::Tensor br = branch.contiguous(), st = stream.contiguous(), w = weight.contiguous(), b = bias.contiguous();
    const std::int64_t n = st.size(-1), rows = st.numel() / n;
    at::Tensor sum = at::empty_like(st), y = at::empty(st.sizes(), st.options().dtype(out_type));
    at::Tensor mean = at::empty({rows}, st.options()), rstd = at::empty({rows}, st.options());
    const float *sp = st.data_ptr<float>(), *wp = w.data_ptr<float>(), *bp = b.data_ptr<float>();
    float *sump = sum.data_ptr<float>(), *mp = mean.data_ptr<float>(), *rp = rstd.data_ptr<float>();
    on_float_or_bf16(br.scalar_type(), [&]<class Branch>() {
      on_float_or_bf16(out_type, [&]<class Out>() {
        const Branch* bp_in = data_of<Branch>(br);
        Out* yp = data_of<Out>(y);
        at::parallel_for(0, rows, row_grain(n), [&](std::int64_t begin, std::int64_t end) {
          ftopt::detail::run_on<AddLayerNormForwardRows<Branch, Out>>(isa, bp_in, sp, wp, bp, sump, yp, mp, rp, begin, end, n,
                                                                      static_cast<float>(eps));
        });
      });
    });
    ctx->saved_data["isa"] = isa_code;
    ctx->saved_data["branch_dtype"] = static_cast<std::int64_t>(branch.scalar_type());
    ctx->saved_data["out"] = out_code;
    ctx->save_for_backward({sum, w, mean, rstd});
    return {sum, y};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &sum = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    const auto isa = static_cast<CpuIsa>(ctx->saved_data["isa"].toInt());
    const auto out_type = static_cast<at::ScalarType>(ctx->saved_data["out"].toInt());
    const std::int64_t n = sum.size(-1), rows = sum.numel() / n;
    const at::Tensor direct = grads[0].defined() ? grads[0].to(at::kFloat).contiguous() : at::Tensor();
    const at::Tensor g = grads[1].defined() ? grads[1].to(out_type).contiguous()
                                            : at::zeros(sum.sizes(), sum.options().dtype(out_type));
    at::Tensor dsum = at::empty_like(sum), dw, db;
    const float *sp = sum.data_ptr<float>(), *wp = w.data_ptr<float>(), *mp = mean.data_ptr<float>(),
                *rp = rstd.data_ptr<float>();
    const float* dp_direct = direct.defined() ? direct.data_ptr<float>() : nullptr;
    float* dp = dsum.data_ptr<float>();
    const bool with_params = ctx->needs_input_grad(2) || ctx->needs_input_grad(3);
    on_float_or_bf16(out_type, [&]<class Out>() {
      const Out* gp = data_of<Out>(g);
      auto rows_of = [&]<bool WithParams>(std::int64_t begin, std::int64_t end, float* dwp, float* dbp) {
        if (dp_direct)
          ftopt::detail::run_on<AddLayerNormBackwardRows<Out, true, WithParams>>(isa, gp, dp_direct, sp, wp, mp, rp, dp,
                                                                                 dwp, dbp, begin, end, n);
        else
          ftopt::detail::run_on<AddLayerNormBackwardRows<Out, false, WithParams>>(isa, gp, dp_direct, sp, wp, mp, rp, dp,
                                                                                  dwp, dbp, begin, end, n);
      };
      if (with_params) {
        const std::int64_t blocks = (rows + add_layer_norm_param_rows - 1) / add_layer_norm_param_rows;
        at::Tensor partial_w = at::zeros({blocks, n}, sum.options()), partial_b = at::zeros({blocks, n}, sum.options());
        float *pw = partial_w.data_ptr<float>(), *pb = partial_b.data_ptr<float>();
        at::parallel_for(0, blocks, 1, [&](std::int64_t first, std::int64_t last) {
          for (std::int64_t k = first; k < last; ++k)
            rows_of.template operator()<true>(k * add_layer_norm_param_rows,
                                              std::min(rows, (k + 1) * add_layer_norm_param_rows), pw + k * n,
                                              pb + k * n);
        });
        dw = sum_blocks_in_order(partial_w);
        db = sum_blocks_in_order(partial_b);
      } else {
        at::parallel_for(0, rows, row_grain(n), [&](std::int64_t begin, std::int64_t end) {
          rows_of.template operator()<false>(begin, end, nullptr, nullptr);
        });
      }
    });
    const auto branch_type = static_cast<at::ScalarType>(ctx->saved_data["branch_dtype"].toInt());
    return {ctx->needs_input_grad(0) ? dsum.to(branch_type) : at::Tensor(), ctx->needs_input_grad(1) ? dsum : at::Tensor(),
            ctx->needs_input_grad(2) ? dw : at::Tensor(), ctx->needs_input_grad(3) ? db : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

} // namespace detail

/// Whether nn::add_layer_norm runs the kernel: on the CPU, a float32 stream with at least one
/// element, a float32 or bf16 branch of its shape, float32 weight and bias of its last dimension,
/// a float32 or bf16 output.
inline bool add_layer_norm_fuses(const at::Tensor& branch, const at::Tensor& stream, const at::Tensor& weight,
                                 const at::Tensor& bias, at::ScalarType out) {
  auto on_cpu = [](const at::Tensor& t) { return t.defined() && t.device().is_cpu(); };
  return on_cpu(branch) && on_cpu(stream) && on_cpu(weight) && on_cpu(bias) && stream.scalar_type() == at::kFloat &&
         (branch.scalar_type() == at::kFloat || branch.scalar_type() == at::kBFloat16) &&
         weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat &&
         (out == at::kFloat || out == at::kBFloat16) && stream.numel() > 0 && branch.sizes() == stream.sizes() &&
         weight.dim() == 1 && bias.dim() == 1 && weight.size(0) == stream.size(-1) && bias.size(0) == stream.size(-1);
}

/// {branch + stream, layer_norm(branch + stream) * weight + bias as `out`}; `fused`: through the
/// kernel where it applies (add_layer_norm_fuses), else the ops; `isa`: the kernel's copy.
inline std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& branch, const at::Tensor& stream,
                                                        const at::Tensor& weight, const at::Tensor& bias, double eps,
                                                        at::ScalarType out, bool fused = true,
                                                        CpuIsa isa = CpuIsa::Widest) {
  if (fused && add_layer_norm_fuses(branch, stream, weight, bias, out)) {
    auto outputs = detail::AddLayerNormFunction::apply(branch, stream, weight, bias, eps, static_cast<std::int64_t>(out),
                                                       static_cast<std::int64_t>(ftopt::detail::row_isa(isa)));
    return {outputs[0], outputs[1]};
  }
  const at::Tensor sum =
      branch.scalar_type() == stream.scalar_type() ? branch + stream : branch.to(stream.scalar_type()) + stream;
  const at::Tensor x = weight.defined() && sum.scalar_type() != weight.scalar_type() ? sum.to(weight.scalar_type()) : sum;
  return {sum, at::layer_norm(x, {x.size(-1)}, weight, bias, eps).to(out)};
}

} // namespace ftopt::nn
