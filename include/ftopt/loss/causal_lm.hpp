#pragma once
/// The causal language-modelling loss, as transformers' ForCausalLMLoss computes it: position t's
/// logits predict label t + 1; labels of -100 (prompt tokens, padding) are ignored; the mean over
/// the labels kept, in float32 whatever the logits' dtype.
///
///   loss::causal_lm(logits, labels)             logits [B, T, V] (a model's output)
///   loss::linear_cross_entropy(h, W, labels)    the same loss from hidden states h [N, H] and the
///                                               LM head's weight W [V, H], never forming the
///                                               [N, V] logits: at most `chunk` rows' worth of
///                                               them alive (tiles of the vocabulary: see
///                                               detail::LinearCrossEntropy), the loss and the
///                                               gradients of h and (when it learns) W computed in
///                                               the forward, so the backward only scales them
///                                               (Liger-Kernel's FusedLinearCrossEntropy,
///                                               torchtune's LinearCrossEntropyLoss). Under
///                                               autocast the GEMMs run in its dtype, the softmax
///                                               in float32. 64 rows' worth by default: at
///                                               SmolLM2's vocabulary (49,152) 12 MiB of float32,
///                                               and benchmarks/memory.cpp measured it faster than
///                                               256 rows' worth (BM_FusedLinearCrossEntropy).
///   loss::fused_causal_lm(weight)               a LossFunction for the Trainer: the model returns
///                                               hidden states [B, T, H] (models::Llama's
///                                               `output_hidden`), `weight()` gives the head.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <ftopt/detail/autograd.hpp>
#include <ftopt/detail/compat.hpp>
#include <ftopt/error.hpp>

namespace ftopt::loss {

/// The label that is not predicted (transformers' and PyTorch's ignore_index).
inline constexpr std::int64_t ignore_index = -100;

/// Labels shifted for next-token prediction: labels[:, 1:] then -100, flattened to [B * T].
inline at::Tensor shifted_labels(const at::Tensor& labels) {
  check(labels.dim() == 2 && !labels.is_floating_point(), "loss::causal_lm: labels must be integer [B, T], got ",
        labels.sizes(), " ", at::toString(labels.scalar_type()));
  return at::cat({labels.slice(1, 1), at::full({labels.size(0), 1}, ignore_index, labels.options())}, 1).flatten();
}

/// The mean cross-entropy of next-token predictions; logits [B, T, V], labels [B, T].
inline at::Tensor causal_lm(const at::Tensor& logits, const at::Tensor& labels) {
  check(logits.dim() == 3 && logits.sizes().slice(0, 2) == labels.sizes(), "loss::causal_lm: logits ",
        logits.sizes(), " do not match labels ", labels.sizes(), " ([B, T, V] and [B, T])");
  const at::Tensor flat = shifted_labels(labels);
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(2)}).to(at::kFloat), flat, {},
                                at::Reduction::Mean, ignore_index);
}

namespace detail {

/// Rows of hidden states that share one pass over the head's weight (linear_cross_entropy).
inline constexpr std::int64_t rows_per_pass = 2048;

/// Forward: the loss and every gradient, tile by tile; backward: those gradients times the
/// loss's incoming gradient.
///
/// The rows go through in passes of up to rows_per_pass; each pass reads the weight in tiles of
/// `columns` vocabulary rows, so each GEMM multiplies all the pass's rows by one tile, and the
/// weight is read (and packed by the GEMM) once per pass rather than once per few rows.
///
/// Where only the hidden states learn (a frozen head: tied embeddings under LoRA), one sweep does
/// it, as attention's online softmax does (the gradient of h is softmax(h W^T) W - W[label], an
/// attention whose keys and values are both W): each tile's logits update the row's running
/// maximum m and sum l of exp(logit - m), and acc = sum of exp(logits - m) W_tile, rescaled by
/// exp(m_old - m_new) when m grows; then d loss / d h = acc / l - W[label]. Two GEMMs per tile,
/// as the logits kept whole would take.
///
/// Where the head learns too, its gradient needs each tile's final softmax: a first sweep gathers
/// each row's log-sum-exp and its label's logit, a second computes each tile's logits again and
/// turns them into the gradient (softmax - onehot), three GEMMs per tile.
struct LinearCrossEntropy : torch::autograd::Function<LinearCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, std::int64_t chunk, at::ScalarType compute) {
    const auto guard = ftopt::detail::no_autocast();
    const at::Tensor h = hidden.to(compute), w = weight.to(compute);
    const auto N = h.size(0), V = w.size(0);
    const at::Tensor kept = labels.ne(ignore_index);
    const std::int64_t count = kept.sum().item<std::int64_t>();
    const double scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
    const bool want_h = hidden.requires_grad(), want_w = weight.requires_grad();
    at::Tensor grad_h = want_h ? at::empty_like(h) : at::Tensor();
    at::Tensor grad_w = want_w ? at::zeros(w.sizes(), w.options().dtype(at::kFloat)) : at::Tensor();
    at::Tensor total = at::zeros({}, h.options().dtype(at::kFloat));
    const auto pass = std::min(N, std::max(chunk, rows_per_pass));
    for (std::int64_t start = 0; start < N; start += pass) {
      const auto n = std::min(pass, N - start);
      // At most chunk * V float32 logits alive: the tile's width.
      const auto columns = std::clamp<std::int64_t>(chunk * V / n, 1, V);
      const at::Tensor hc = h.narrow(0, start, n), yc = labels.narrow(0, start, n), kc = kept.narrow(0, start, n);
      auto tile_logits = [&](std::int64_t first, std::int64_t width) {
        return at::matmul(hc, w.narrow(0, first, width).t()).to(at::kFloat);
      };
      // The label's column within a tile, and whether the label is in it.
      auto label_in = [&](std::int64_t first, std::int64_t width) {
        return std::pair{(yc - first).clamp(0, width - 1).unsqueeze(1),
                         kc.logical_and(yc.ge(first)).logical_and(yc.lt(first + width))};
      };
      at::Tensor lse = at::full({n}, -std::numeric_limits<float>::infinity(), h.options().dtype(at::kFloat));
      at::Tensor label_logit = at::zeros({n}, lse.options());
      const at::Tensor rows = (kc.to(at::kFloat) * scale).unsqueeze(1);
      if (want_h && !want_w) {
        at::Tensor max = lse.clone();  // the running maximum m, -inf at first
        at::Tensor sum = at::zeros({n}, lse.options()), acc = at::zeros({n, h.size(1)}, lse.options());
        for (std::int64_t first = 0; first < V; first += columns) {
          const auto width = std::min(columns, V - first);
          at::Tensor p = tile_logits(first, width);
          const auto [column, in] = label_in(first, width);
          label_logit += p.gather(1, column).squeeze(1) * in;
          const at::Tensor grown = at::maximum(max, p.amax(1));
          const at::Tensor rescale = (max - grown).exp_();  // 0 on the first tile: exp(-inf)
          max.copy_(grown);
          p.sub_(grown.unsqueeze(1)).exp_();
          sum.mul_(rescale).add_(p.sum(1));
          acc.mul_(rescale.unsqueeze(1)).add_(at::matmul(p.to(compute), w.narrow(0, first, width)));
        }
        total += ((at::log(sum).add_(max) - label_logit) * kc).sum();
        // softmax(h W^T) W less the label's row, each kept row scaled by 1 / count.
        const at::Tensor label_rows = w.index_select(0, yc.clamp(0, V - 1)).to(at::kFloat);
        grad_h.narrow(0, start, n).copy_(acc.div_(sum.unsqueeze(1)).sub_(label_rows).mul_(rows));
        continue;
      }
      for (std::int64_t first = 0; first < V; first += columns) {
        const auto width = std::min(columns, V - first);
        const at::Tensor logits = tile_logits(first, width);
        lse = at::logaddexp(lse, at::logsumexp(logits, 1));
        const auto [column, in] = label_in(first, width);
        label_logit += logits.gather(1, column).squeeze(1) * in;
      }
      total += ((lse - label_logit) * kc).sum();
      if (!want_h && !want_w) continue;
      // d loss / d logits = (softmax - onehot) / count on kept rows, 0 elsewhere; the row scale is
      // applied to the [n, H] products, not to the [n, V] ones.
      at::Tensor sum_h = want_h ? at::zeros({n, h.size(1)}, lse.options()) : at::Tensor();
      const at::Tensor scaled_h = want_w ? hc.to(at::kFloat).mul(rows) : at::Tensor();
      for (std::int64_t first = 0; first < V; first += columns) {
        const auto width = std::min(columns, V - first);
        at::Tensor g = tile_logits(first, width).sub_(lse.unsqueeze(1)).exp_();
        const auto [column, in] = label_in(first, width);
        g.scatter_add_(1, column, in.to(at::kFloat).neg().unsqueeze(1));
        if (want_h) sum_h.add_(at::matmul(g.to(compute), w.narrow(0, first, width)));
        if (want_w) grad_w.narrow(0, first, width).addmm_(g.t(), scaled_h);
      }
      if (want_h) grad_h.narrow(0, start, n).copy_(sum_h.mul_(rows));
    }
    ctx->save_for_backward({grad_h, grad_w});
    ctx->saved_data["hidden_dtype"] = static_cast<std::int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<std::int64_t>(weight.scalar_type());
    return total * scale;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& g = grad_out[0];
    auto scaled = [&](const at::Tensor& grad, const char* dtype) {
      if (!grad.defined()) return at::Tensor();
      return (grad.to(at::kFloat) * g).to(static_cast<at::ScalarType>(ctx->saved_data[dtype].toInt()));
    };
    return {scaled(saved[0], "hidden_dtype"), scaled(saved[1], "weight_dtype"), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};
} // namespace detail

/// Mean cross-entropy of softmax(h W^T) against labels (-100 ignored), `chunk` rows at a time.
/// hidden [N, H], weight [V, H], labels [N].
inline at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                       std::int64_t chunk = 64) {
  check(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1) && labels.dim() == 1 &&
            labels.size(0) == hidden.size(0),
        "loss::linear_cross_entropy: hidden ", hidden.sizes(), ", weight ", weight.sizes(), " and labels ",
        labels.sizes(), " are not [N, H], [V, H] and [N]");
  check(chunk >= 1, "loss::linear_cross_entropy: chunk must be >= 1, got ", chunk);
  const auto device = hidden.device().type();
  const at::ScalarType compute = compat::autocast_enabled(device) ? compat::autocast_dtype(device)
                                                                  : hidden.scalar_type();
  const at::Tensor outside = labels.ne(ignore_index).logical_and(labels.lt(0).logical_or(labels.ge(weight.size(0))));
  if (outside.any().item<bool>())
    fail("loss::linear_cross_entropy: label ", labels.masked_select(outside)[0].item<std::int64_t>(),
         " is outside the vocabulary of ", weight.size(0), " (and not -100)");
  return detail::LinearCrossEntropy::apply(hidden, weight, labels, chunk, compute);
}

/// A Trainer loss over hidden states [B, T, H] and labels [B, T]: next-token prediction through
/// the head `weight()` returns, by linear_cross_entropy.
inline std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> fused_causal_lm(
    std::function<at::Tensor()> weight, std::int64_t chunk = 64) {
  return [weight = std::move(weight), chunk](const at::Tensor& hidden, const at::Tensor& labels) {
    check(hidden.dim() == 3 && hidden.sizes().slice(0, 2) == labels.sizes(), "loss::fused_causal_lm: hidden states ",
          hidden.sizes(), " do not match labels ", labels.sizes(), " ([B, T, H] and [B, T])");
    return linear_cross_entropy(hidden.reshape({-1, hidden.size(2)}), weight(), shifted_labels(labels), chunk);
  };
}

} // namespace ftopt::loss
