#pragma once
/// Memory-efficient attention for any LibTorch: softmax(q k^T / sqrt(d)) v computed over blocks
/// of `chunk` query rows, flash-attention style (Dao et al. 2022, "FlashAttention", Alg. 1-2 with
/// the key loop unrolled into one block). The forward keeps only q, k, v, the output and each
/// row's log-sum-exp; the backward recomputes each block's probabilities, so no [L, S]
/// attention matrix is ever kept for the backward and at most [chunk, S] is live at once.
///
///   auto out = ftopt::nn::chunked_attention(q, k, v, {.chunk = 128});   // q [..., L, d], k, v [..., S, d]
///
/// Gradients (P = softmax(S), O = P V, D = rowsum(dO * O)):
///   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ = dS K / sqrt(d),  dK = dS^T Q / sqrt(d).
/// Half-precision inputs: the products run in their dtype, the softmax and the accumulation of
/// dK and dV in float32 (as nn::scaled_dot_product_attention's fp32 softmax island).
/// No attention dropout and no double backward. On LibTorch 2.x, at::scaled_dot_product_attention
/// has fused kernels that do the same; this one is for 1.13 and for comparison.

#include <cmath>
#include <cstdint>
#include <limits>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <ftopt/error.hpp>

namespace ftopt::nn {

struct ChunkedAttentionOptions {
  std::int64_t chunk = 128;  ///< query rows per block
  bool is_causal = false;    ///< query i attends to keys 0..i only
};

namespace detail {

/// The dtype softmax and accumulation run in: float32 for half-precision inputs.
inline at::ScalarType accumulation_type(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
}

/// The scores of query rows [begin, begin + rows) against all keys, masked, in the accumulation
/// dtype.
inline at::Tensor chunk_scores(const at::Tensor& q, const at::Tensor& k, std::int64_t begin, std::int64_t rows,
                               double scale, bool causal) {
  at::Tensor s = at::matmul(q.narrow(-2, begin, rows), k.transpose(-2, -1))
                     .to(accumulation_type(q.scalar_type()))
                     .mul_(scale);
  if (causal) {
    auto row = at::arange(begin, begin + rows, s.options().dtype(at::kLong)).unsqueeze(1);
    auto col = at::arange(k.size(-2), s.options().dtype(at::kLong)).unsqueeze(0);
    s.masked_fill_(col > row, -std::numeric_limits<float>::infinity());
  }
  return s;
}

struct ChunkedAttentionFunction : torch::autograd::Function<ChunkedAttentionFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v, std::int64_t chunk,
                                                bool causal) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const std::int64_t L = q.size(-2);
    auto shape = q.sizes().vec();
    shape.back() = v.size(-1);
    at::Tensor out = at::empty(shape, v.options());
    shape.pop_back();
    at::Tensor lse = at::empty(shape, q.options().dtype(accumulation_type(q.scalar_type())));
    for (std::int64_t begin = 0; begin < L; begin += chunk) {
      const std::int64_t rows = std::min(chunk, L - begin);
      at::Tensor s = chunk_scores(q, k, begin, rows, scale, causal);
      at::Tensor m = at::logsumexp(s, -1, /*keepdim=*/true);
      lse.narrow(-1, begin, rows).copy_(m.squeeze(-1));
      out.narrow(-2, begin, rows).copy_(at::matmul(s.sub_(m).exp_().to(v.scalar_type()), v));
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["causal"] = causal;
    return {out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const std::int64_t chunk = ctx->saved_data["chunk"].toInt();
    const bool causal = ctx->saved_data["causal"].toBool();
    const at::Tensor& dout = grads[0];
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const std::int64_t L = q.size(-2);
    const auto low = q.scalar_type(), acc = accumulation_type(low);

    at::Tensor D = (dout.to(acc) * out.to(acc)).sum(-1, /*keepdim=*/true);
    at::Tensor dq = at::empty_like(q);
    at::Tensor dk = at::zeros(k.sizes(), k.options().dtype(acc));
    at::Tensor dv = at::zeros(v.sizes(), v.options().dtype(acc));
    for (std::int64_t begin = 0; begin < L; begin += chunk) {
      const std::int64_t rows = std::min(chunk, L - begin);
      at::Tensor p = chunk_scores(q, k, begin, rows, scale, causal)
                         .sub_(lse.narrow(-1, begin, rows).unsqueeze(-1))
                         .exp_();
      at::Tensor dout_c = dout.narrow(-2, begin, rows);
      // Broadcast batch dims (a k shared across heads) are summed by sum_to below.
      dv.add_(at::sum_to(at::matmul(p.to(low).transpose(-2, -1), dout_c).to(acc), dv.sizes()));
      at::Tensor dp = at::matmul(dout_c, v.transpose(-2, -1)).to(acc);
      at::Tensor ds = p.mul_(dp.sub_(D.narrow(-2, begin, rows))).mul_(scale).to(low);
      dq.narrow(-2, begin, rows).copy_(at::matmul(ds, k));
      dk.add_(at::sum_to(at::matmul(ds.transpose(-2, -1), q.narrow(-2, begin, rows)).to(acc), dk.sizes()));
    }
    return {dq, dk.to(k.scalar_type()), dv.to(v.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

} // namespace detail

/// softmax(q k^T / sqrt(d)) v with O(chunk * S) live attention memory; q [..., L, d], k [..., S, d],
/// v [..., S, dv], the batch dims equal or broadcast.
inline at::Tensor chunked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    ChunkedAttentionOptions options = {}) {
  ftopt::detail::check(options.chunk >= 1, "nn::chunked_attention: chunk must be >= 1, got ", options.chunk);
  ftopt::detail::check(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
                       "nn::chunked_attention: q, k and v need the same rank (>= 2), got ", q.sizes(), ", ",
                       k.sizes(), " and ", v.sizes());
  ftopt::detail::check(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
                       "nn::chunked_attention: q ", q.sizes(), ", k ", k.sizes(), " and v ", v.sizes(),
                       " do not fit q k^T v");
  return detail::ChunkedAttentionFunction::apply(q, k, v, options.chunk, options.is_causal)[0];
}

} // namespace ftopt::nn
