// Tests for include/ftopt/trainer/stepping.hpp: accumulation windows, whether a step happened,
// and gradient clipping, each against the PyTorch loop it replaces.
#include <catch2/catch.hpp>

#include <cmath>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

TEST_CASE("Accumulating 4 micro-batches of 32 equals one batch of 128", "[trainer][memory]") {
  // mean over 128 = mean of the 4 means over 32 (equal sizes), so (sum of grads / 4) equals the
  // full-batch gradient up to fp32 rounding.
  auto micro = test::random_batches(4, 32);
  std::vector<torch::Tensor> xs, ys;
  for (auto& [x, y] : micro) xs.push_back(x), ys.push_back(y);
  test::Batches full{{torch::cat(xs), torch::cat(ys)}};

  auto accumulated = test::small_mlp();
  auto whole = test::small_mlp();
  Trainer<precision::Fp32, peft::Full, memory::None> by_four(quiet(), {}, {}, memory::None{.accumulate = 4});
  Trainer<> at_once(quiet());
  torch::optim::SGD opt_a(by_four.prepare(accumulated), torch::optim::SGDOptions(0.5));
  torch::optim::SGD opt_b(at_once.prepare(whole), torch::optim::SGDOptions(0.5));
  auto a = by_four.fit(accumulated, opt_a, micro);
  auto b = at_once.fit(whole, opt_b, full);
  CHECK(a.epochs[0].optimizer_steps == 1);
  CHECK(a.epochs[0].steps == 4);
  CHECK(b.epochs[0].optimizer_steps == 1);
  auto pa = test::snapshot(*accumulated), pb = test::snapshot(*whole);
  for (std::size_t i = 0; i < pa.size(); ++i) CHECK(torch::allclose(pa[i], pb[i], 1e-5, 1e-6));
  CHECK(a.epochs[0].loss == Approx(b.epochs[0].loss).epsilon(1e-5));
}

TEST_CASE("An epoch that ends inside an accumulation window still steps", "[trainer][memory]") {
  // Lightning's accumulate_grad_batches: the last, shorter window of an epoch steps too.
  auto batches = test::random_batches(5, 4);
  auto model = test::small_mlp();
  Trainer<precision::Fp32, peft::Full, memory::None> trainer(quiet({.epochs = 2}), {}, {},
                                                             memory::None{.accumulate = 2});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  auto summary = trainer.fit(model, optimizer, batches);
  CHECK(summary.epochs[0].optimizer_steps == 3);  // windows {0,1} {2,3} {4}
  CHECK(summary.epochs[1].optimizer_steps == 3);
}

TEST_CASE("train_step says whether the optimizer stepped", "[trainer][memory]") {
  // Accumulating 2: the first micro-batch of a window does not step, the second does, and a
  // micro-batch that ends the epoch steps whatever the window.
  auto model = test::small_mlp();
  Trainer<precision::Fp32, peft::Full, memory::None> trainer(quiet(), {}, {}, memory::None{.accumulate = 2});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  const auto batch = test::random_batches(1, 4).front();
  CHECK_FALSE(trainer.train_step(model, optimizer, batch).stepped);
  CHECK(trainer.train_step(model, optimizer, batch).stepped);
  CHECK(trainer.train_step(model, optimizer, batch, /*ends_epoch=*/true).stepped);
}

TEST_CASE("Gradient clipping matches torch.nn.utils.clip_grad_norm_", "[trainer][clip]") {
  // PyTorch: total = ||(||g_i||)||, coef = min(1, max_norm / (total + 1e-6)), g_i *= coef.
  // LibTorch's own clip_grad_norm_ implements the same formula; compare against it.
  torch::manual_seed(3);
  std::vector<torch::Tensor> ours, theirs;
  for (auto shape : {std::vector<std::int64_t>{3, 4}, {5}, {2, 2, 2}}) {
    auto g = torch::randn(shape) * 3;
    auto a = torch::zeros(shape, torch::requires_grad()), b = torch::zeros(shape, torch::requires_grad());
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    ours.push_back(a);
    theirs.push_back(b);
  }
  for (double max_norm : {0.5, 1e6}) {
    auto total = ftopt::detail::clip_grad_norm(ours, max_norm).item<double>();
    auto expected = torch::nn::utils::clip_grad_norm_(theirs, max_norm);
    CHECK(total == Approx(expected).epsilon(1e-6));
    for (std::size_t i = 0; i < ours.size(); ++i) CHECK(torch::allclose(ours[i].grad(), theirs[i].grad(), 1e-6, 1e-7));
  }
  SECTION("the Trainer's update is the clipped gradient") {
    auto model = test::small_mlp();
    auto before = test::snapshot(*model);
    Trainer<> trainer(quiet({.clip_grad_norm = 0.01}));
    torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(1.0));
    trainer.fit(model, optimizer, test::random_batches(1, 16));
    auto after = test::snapshot(*model);
    double squared = 0;
    for (std::size_t i = 0; i < after.size(); ++i) squared += (after[i] - before[i]).pow(2).sum().item<double>();
    CHECK(std::sqrt(squared) == Approx(0.01).epsilon(1e-4));  // lr 1: the step is the gradient
  }
}
