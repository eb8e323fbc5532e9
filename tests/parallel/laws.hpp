#pragma once
// The laws of ftopt::parallel::Policy (include/ftopt/parallel/concept.hpp), checked the same way
// for every policy: tests/parallel/concept.cpp runs them in-process for Single and through
// ddp_worker.cpp's --laws mode on 2 real ranks for Ddp. Each rank measures how far the policy
// is from what the law says, with the expected values computed here from autograd alone:
//   broadcast  after setup every rank holds rank 0's weights (each rank starts from its own seed);
//   local      after_backward(false) leaves the gradient of the rank's own batch (no_sync);
//   synced     after_backward(true) every rank holds the mean over ranks of the gradients each
//              rank's batch gives alone;
//   reduce     reduce_sum of t_r = (r + 1) [1, 2, 3] is (1 + ... + world) [1, 2, 3]; on one rank
//              it is t itself.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/trainer/gradients.hpp>

namespace ftopt::test::laws {

struct Distances {
  std::int64_t rank = -1, world = 0;
  double broadcast = 0, local = 0, synced = 0, reduce = 0;
};

/// The weights every rank would start from with seed `seed`.
inline torch::nn::Linear layer(std::uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Linear(4, 3);
}

/// Rank r's batch: every rank can compute every rank's.
inline std::pair<torch::Tensor, torch::Tensor> batch(std::int64_t r) {
  auto generator = at::detail::createCPUGenerator(100 + static_cast<std::uint64_t>(r));
  return {torch::randn({5, 4}, generator), torch::randn({5, 3}, generator)};
}

/// The gradients rank r's batch gives a plain copy of `weights`, without any policy.
inline std::vector<torch::Tensor> alone(const std::vector<torch::Tensor>& weights, std::int64_t r) {
  auto copy = layer(0);
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < weights.size(); ++i) copy->parameters()[i].copy_(weights[i]);
  }
  auto [x, y] = batch(r);
  torch::mse_loss(copy(x), y).backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : copy->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

inline double max_distance(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

/// One micro-batch through the policy's hooks in the Trainer's order, from gradients cleared as
/// the Trainer clears them (trainer::zero_grad).
template <class P>
std::vector<torch::Tensor> step(P& policy, torch::nn::Linear& model, bool sync) {
  auto trainable = model->parameters();
  trainer::zero_grad(policy, trainable);
  policy.before_forward(sync);
  auto [x, y] = batch(policy.rank());
  const auto output = model(x);
  const auto loss = torch::mse_loss(output, y);
  policy.before_backward(output, sync);
  auto backward = [&] { loss.backward(); };
  if constexpr (requires { policy.guard(backward); }) policy.guard(backward);
  else backward();
  policy.after_backward(sync);
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

template <class P>
Distances measure(P& policy) {
  Distances d;
  auto model = layer(11 + static_cast<std::uint64_t>(std::max(0, policy.rank())));
  const std::vector<torch::Tensor> trainable = model->parameters();
  policy.setup(*model, trainable);
  d.rank = policy.rank();
  d.world = policy.world_size();

  std::vector<torch::Tensor> weights;
  for (const auto& p : model->parameters()) weights.push_back(p.detach().clone());
  d.broadcast = max_distance(weights, layer(11)->parameters());

  d.local = max_distance(step(policy, model, false), alone(weights, d.rank));

  auto mean = alone(weights, 0);
  for (std::int64_t r = 1; r < d.world; ++r) {
    const auto g = alone(weights, r);
    for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += g[i];
  }
  for (auto& g : mean) g /= static_cast<double>(d.world);
  d.synced = max_distance(step(policy, model, true), mean);

  const auto t = torch::tensor({1.0, 2.0, 3.0}, torch::kDouble);
  const torch::Tensor summed = policy.reduce_sum(t * static_cast<double>(d.rank + 1));
  d.reduce = (summed - t * static_cast<double>(d.world * (d.world + 1) / 2)).abs().max().item<double>();
  return d;
}

} // namespace ftopt::test::laws
