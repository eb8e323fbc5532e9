// Tests for include/ftopt/optim/fused_adamw.hpp against torch::optim::AdamW itself (LibTorch's
// torch/csrc/api/src/optim/adamw.cpp): twin models, same initial weights, same batches.
//
// Tolerance: float32, 1e-6 absolute. Both sides compute AdamW's formulas (p *= 1 - lr wd;
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)),
// but the fused kernel evaluates them in another order (a lerp for m, one expression per element,
// vectorized, FMA), so each step can differ by a few ulps (~6e-8 at |p| ~ 0.5); Adam's update is
// normalized (|dp| <~ lr), so these differences do not grow much over 10 steps (LibTorch 2.11's
// CPU kernel: at most 6e-8 without amsgrad, 1.2e-7 with it).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <sstream>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/optim/fused_adamw.hpp>

using ftopt::optim::FusedAdamW;
using torch::optim::AdamW;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

namespace fused_adamw_test {

constexpr double tolerance = 1e-6;
constexpr int steps = 10;

/// A two-layer net plus `extra`, a bias added only on steps 1, 4 and 7 (no grad on the others,
/// and none on step 0, so its state is created late) and held in float64 (a second dtype in its
/// param group).
struct Net {
  std::vector<torch::Tensor> params;  // w1, b1, w2, b2, extra

  Net clone() const {
    Net copy;
    for (const auto& p : params) copy.params.push_back(p.detach().clone().requires_grad_(true));
    return copy;
  }
};

Net make_net() {
  torch::manual_seed(7);
  Net net;
  const std::vector<std::vector<std::int64_t>> shapes = {{16, 6}, {16}, {3, 16}, {3}};
  for (const auto& shape : shapes)
    net.params.push_back((torch::randn(shape) * 0.5).requires_grad_(true));
  net.params.push_back(torch::randn({3}, torch::kDouble).mul(0.1).requires_grad_(true));
  return net;
}

bool uses_extra(int step) { return step % 3 == 1; }

struct Batch {
  torch::Tensor x, y;
};

std::vector<Batch> make_batches() {
  torch::manual_seed(11);
  std::vector<Batch> batches;
  for (int s = 0; s < steps; ++s) batches.push_back({torch::randn({8, 6}), torch::randn({8, 3})});
  return batches;
}

torch::Tensor loss_of(const Net& net, const Batch& batch, int step) {
  const auto& p = net.params;
  auto out = torch::linear(torch::tanh(torch::linear(batch.x, p[0], p[1])), p[2], p[3]);
  if (uses_extra(step)) out = out + p[4].to(torch::kFloat);
  return torch::mse_loss(out, batch.y);
}

/// Two groups with different lr, betas, eps and weight decay > 0.
std::vector<torch::optim::OptimizerParamGroup> groups_of(const Net& net, bool amsgrad) {
  const auto& p = net.params;
  AdamWOptions first(1e-2);
  first.weight_decay(0.1).amsgrad(amsgrad);
  AdamWOptions second(3e-3);
  second.weight_decay(0.05).betas(std::make_tuple(0.8, 0.99)).eps(1e-6).amsgrad(amsgrad);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p[0], p[1]}, std::make_unique<AdamWOptions>(first));
  groups.emplace_back(std::vector<torch::Tensor>{p[2], p[3], p[4]}, std::make_unique<AdamWOptions>(second));
  return groups;
}

void train(torch::optim::Optimizer& optimizer, const Net& net, const std::vector<Batch>& batches, int from,
           int to) {
  for (int s = from; s < to; ++s) {
    for (const auto& p : net.params) p.mutable_grad() = torch::Tensor();
    loss_of(net, batches[s], s).backward();
    optimizer.step();
  }
}

const AdamWParamState& state_of(torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  return static_cast<const AdamWParamState&>(*optimizer.state().at(ftopt::compat::optimizer_state_key(p)));
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.detach().to(torch::kDouble) - b.detach().to(torch::kDouble)).abs().max().item<double>();
}

/// The largest difference between the twins' parameters and AdamW states; checks that the same
/// parameters have state on both sides, with the same step counts.
double compare(torch::optim::Optimizer& a, const Net& net_a, torch::optim::Optimizer& b, const Net& net_b,
               bool amsgrad) {
  double worst = 0.0;
  for (std::size_t i = 0; i < net_a.params.size(); ++i) {
    INFO("parameter " << i);
    const auto &pa = net_a.params[i], &pb = net_b.params[i];
    worst = std::max(worst, max_diff(pa, pb));
    const bool has_state = a.state().count(ftopt::compat::optimizer_state_key(pa)) == 1;
    REQUIRE(has_state == (b.state().count(ftopt::compat::optimizer_state_key(pb)) == 1));
    if (!has_state) continue;
    const auto &sa = state_of(a, pa), &sb = state_of(b, pb);
    CHECK(sa.step() == sb.step());
    worst = std::max({worst, max_diff(sa.exp_avg(), sb.exp_avg()), max_diff(sa.exp_avg_sq(), sb.exp_avg_sq())});
    REQUIRE(sa.max_exp_avg_sq().defined() == amsgrad);
    REQUIRE(sb.max_exp_avg_sq().defined() == amsgrad);
    if (amsgrad) worst = std::max(worst, max_diff(sa.max_exp_avg_sq(), sb.max_exp_avg_sq()));
  }
  return worst;
}

} // namespace fused_adamw_test

using namespace fused_adamw_test;

TEST_CASE("FusedAdamW is fused on the devices this LibTorch has the kernel for", "[optim]") {
  // at::_fused_adamw_: CUDA since 2.0, the CPU since 2.4 (torch/utils/_foreach_utils.py's
  // _get_fused_kernels_supported_devices lists "cpu" from 2.4).
  CHECK(ftopt::compat::has_fused_adamw(torch::kCPU) == FTOPT_TORCH_AT_LEAST(2, 4));
  CHECK(ftopt::compat::has_fused_adamw(torch::kCUDA) == FTOPT_TORCH_AT_LEAST(2, 0));
  CHECK_FALSE(ftopt::compat::has_fused_adamw(torch::kMeta));

  auto net = make_net();
  const auto before = net.clone();
  FusedAdamW optimizer(groups_of(net, false));
  train(optimizer, net, make_batches(), 0, steps);
  // One kernel per group and (device, dtype) in it: group 1 every step; group 2 once for w2 and
  // b2, and a second time (float64) on the 3 steps where `extra` has a gradient.
  CHECK(optimizer.fused_launches() == (ftopt::compat::has_fused_adamw(torch::kCPU) ? 2 * steps + 3 : 0));
  for (std::size_t i = 0; i < net.params.size(); ++i) CHECK(max_diff(net.params[i], before.params[i]) > 1e-4);
}

TEST_CASE("FusedAdamW matches torch::optim::AdamW step for step", "[optim]") {
  const bool amsgrad = GENERATE(false, true);
  INFO("amsgrad " << amsgrad);
  const auto batches = make_batches();
  auto fused_net = make_net();
  auto plain_net = fused_net.clone();
  FusedAdamW fused(groups_of(fused_net, amsgrad));
  AdamW plain(groups_of(plain_net, amsgrad));
  double worst = 0.0;
  for (int s = 0; s < steps; ++s) {
    train(fused, fused_net, batches, s, s + 1);
    train(plain, plain_net, batches, s, s + 1);
    worst = std::max(worst, compare(fused, fused_net, plain, plain_net, amsgrad));
  }
  CAPTURE(worst);
  CHECK(worst <= tolerance);
  CHECK(state_of(fused, fused_net.params[0]).step() == steps);
  CHECK(state_of(fused, fused_net.params[4]).step() == 3);  // steps 1, 4 and 7 only
}

TEST_CASE("FusedAdamW's closure runs under grad mode and its loss is returned", "[optim]") {
  const auto batches = make_batches();
  auto fused_net = make_net();
  auto plain_net = fused_net.clone();
  FusedAdamW fused(groups_of(fused_net, false));
  AdamW plain(groups_of(plain_net, false));
  for (int s = 0; s < 3; ++s) {
    auto closure_for = [&](const Net& net) {
      return [&net, &batches, s] {
        CHECK(torch::GradMode::is_enabled());
        for (const auto& p : net.params) p.mutable_grad() = torch::Tensor();
        auto loss = loss_of(net, batches[s], s);
        loss.backward();
        return loss;
      };
    };
    const auto fused_loss = fused.step(closure_for(fused_net));
    const auto plain_loss = plain.step(closure_for(plain_net));
    REQUIRE(fused_loss.defined());
    CHECK(std::abs(fused_loss.item<double>() - plain_loss.item<double>()) <= tolerance);
  }
  const double worst = compare(fused, fused_net, plain, plain_net, false);
  CAPTURE(worst);
  CHECK(worst <= tolerance);
}

TEST_CASE("FusedAdamW resumes from a saved optimizer, its own or AdamW's", "[optim]") {
  const bool amsgrad = GENERATE(false, true);
  INFO("amsgrad " << amsgrad);
  const auto batches = make_batches();
  constexpr int half = steps / 2;

  SECTION("its own checkpoint: the same steps, bit for bit") {
    auto net = make_net();
    FusedAdamW optimizer(groups_of(net, amsgrad));
    train(optimizer, net, batches, 0, half);
    std::stringstream saved;
    torch::save(optimizer, saved);
    auto resumed_net = net.clone();
    FusedAdamW resumed(groups_of(resumed_net, amsgrad));
    torch::load(resumed, saved);
    train(optimizer, net, batches, half, steps);
    train(resumed, resumed_net, batches, half, steps);
    CHECK(compare(optimizer, net, resumed, resumed_net, amsgrad) == 0.0);
  }
  SECTION("AdamW's checkpoint: continues as AdamW does") {
    auto net = make_net();
    AdamW plain(groups_of(net, amsgrad));
    train(plain, net, batches, 0, half);
    std::stringstream saved;
    torch::save(plain, saved);
    auto resumed_net = net.clone();
    FusedAdamW resumed(groups_of(resumed_net, amsgrad));
    torch::load(resumed, saved);
    CHECK(state_of(resumed, resumed_net.params[0]).step() == half);
    train(plain, net, batches, half, steps);
    train(resumed, resumed_net, batches, half, steps);
    const double worst = compare(plain, net, resumed, resumed_net, amsgrad);
    CAPTURE(worst);
    CHECK(worst <= tolerance);
  }
}

TEST_CASE("FusedAdamW takes AdamW's own step for tensors the kernel cannot take", "[optim]") {
  // A leaf parameter with transposed strides: its gradient follows them, and the kernels index
  // dense row-major memory, so the whole step is AdamW's (the same result, bit for bit).
  torch::manual_seed(3);
  auto strided = torch::randn({6, 4}).t().requires_grad_(true);
  REQUIRE_FALSE(strided.is_contiguous());
  auto twin = strided.detach().clone().requires_grad_(true);
  FusedAdamW fused(std::vector<torch::Tensor>{strided}, AdamWOptions(1e-2).weight_decay(0.1));
  AdamW plain(std::vector<torch::Tensor>{twin}, AdamWOptions(1e-2).weight_decay(0.1));
  const auto x = torch::randn({5, 4});
  for (int s = 0; s < 3; ++s) {
    for (auto* p : {&strided, &twin}) p->mutable_grad() = torch::Tensor();
    torch::matmul(x, strided).pow(2).sum().backward();
    torch::matmul(x, twin).pow(2).sum().backward();
    fused.step();
    plain.step();
  }
  CHECK(fused.fused_launches() == 0);
  CHECK(torch::equal(strided, twin));
  CHECK(state_of(fused, strided).step() == 3);
}
