#pragma once
/// clip_grad_norm: PyTorch's torch.nn.utils.clip_grad_norm_ (2.x, foreach=False path):
///   total = || (||g_1||_2, ..., ||g_n||_2) ||_2
///   coef  = min(1, max_norm / (total + 1e-6));   every g *= coef
/// It stays on the gradients' device: the clamp is a tensor op, so nothing waits for the host.

#include <vector>

#include <ATen/ATen.h>

namespace ftopt::detail {

/// Clips in place; returns the total norm before clipping (a 0-dim tensor), undefined when no
/// parameter has a gradient.
inline at::Tensor clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm) {
  std::vector<at::Tensor> norms;
  norms.reserve(parameters.size());
  for (const auto& p : parameters)
    if (p.grad().defined()) norms.push_back(p.grad().norm(2).to(at::kFloat));
  if (norms.empty()) return {};
  at::Tensor total = at::stack(norms).norm(2);
  at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (const auto& p : parameters)
    if (p.grad().defined()) p.grad().mul_(coef);
  return total;
}

} // namespace ftopt::detail
