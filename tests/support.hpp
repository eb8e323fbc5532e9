#pragma once
// Helpers shared by the test sources.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/error.hpp>
#include <ftopt/json.hpp>
#include <ftopt/models/mlp.hpp>
#include <ftopt/models/vit.hpp>
#include <ftopt/state.hpp>
#include <ftopt/trainer_options.hpp>
#include <ftopt/weights/state_dict.hpp>

namespace ftopt::test {

/// Marks the running test as skipped, for a reason the machine gives (no CUDA device): ctest's
/// SKIP_REGULAR_EXPRESSION matches the line this prints and reports the test as skipped, never as
/// passed (a test that only skips makes no assertion, which -w NoAssertions fails). Return right
/// after it. Only tests named "CUDA: ..." may skip in CI (scripts/test.sh checks).
inline void skip(const std::string& why) { WARN("SKIPPED: " << why); }

#ifdef FTOPT_FIXTURES
/// A file of tests/fixtures (written by tests/fixtures/make_fixtures.py).
inline std::filesystem::path fixture(const std::string& name) { return std::filesystem::path(FTOPT_FIXTURES) / name; }
#endif

/// ATen's intra-op thread count set for a scope, restored after it.
class ThreadsGuard {
public:
  explicit ThreadsGuard(int threads) : previous_(at::get_num_threads()) { at::set_num_threads(threads); }
  ~ThreadsGuard() { at::set_num_threads(previous_); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

private:
  int previous_;
};

/// The names of a module's state dict, in order.
inline std::vector<std::string> state_dict_names(const torch::nn::Module& module) {
  std::vector<std::string> out;
  for (const auto& item : weights::state_dict(module)) out.push_back(item.key());
  return out;
}

/// The outputs, then the gradients of `x` and of every parameter of `module` that trains, after a
/// backward of sum(out_i * g_i) with fixed random g_i (seed 3). A gradient the outputs do not
/// reach (a merged LoRA branch's) reads as a scalar zero.
inline std::vector<torch::Tensor> outputs_and_gradients(const std::vector<torch::Tensor>& out, const torch::Tensor& x,
                                                        torch::nn::Module& module) {
  torch::manual_seed(3);
  torch::Tensor loss = torch::zeros({});
  for (const auto& o : out) loss = loss + (o.to(torch::kFloat) * torch::randn(o.sizes())).sum();
  loss.backward();
  std::vector<torch::Tensor> result = out;
  result.push_back(x.grad());
  for (auto& p : module.parameters())
    if (p.requires_grad()) result.push_back(p.grad().defined() ? p.grad() : torch::zeros({}));
  return result;
}

/// A scratch folder removed at the end of the test.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("ftopt-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

/// The message of the ftopt::Error that f throws, or a note that it threw none.
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ftopt::Error& e) {
    return e.what();
  }
  return "(no ftopt::Error thrown)";
}

/// Deep copies of a module's parameters, in order.
inline std::vector<torch::Tensor> snapshot(torch::nn::Module& module) {
  std::vector<torch::Tensor> copies;
  for (auto& p : module.parameters()) copies.push_back(p.detach().clone());
  return copies;
}

inline bool same_values(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

/// A small classifier, the same weights for the same seed.
inline models::Mlp small_mlp(std::uint64_t seed = 1, double dropout = 0.0) {
  torch::manual_seed(seed);
  return models::Mlp({.in = 6, .hidden = {16}, .out = 3, .dropout = dropout});
}

/// Trainer options for tests: the CPU, no hardware report.
inline TrainerOptions quiet(TrainerOptions options = {}) {
  options.report_hardware = false;
  options.device = torch::kCPU;
  return options;
}

/// Cross-entropy whose `call`-th evaluation (1-based) returns NaN: a NaN loss injected mid-run.
inline LossFunction nan_on_call(int call) {
  auto calls = std::make_shared<int>(0);
  return [calls, call](const torch::Tensor& out, const torch::Tensor& y) {
    auto loss = torch::nn::functional::cross_entropy(out, y);
    return ++*calls == call ? loss * std::numeric_limits<double>::quiet_NaN() : loss;
  };
}

/// A callback that copies the module's parameters once `step` micro-batches of an epoch are done.
struct SnapshotAt {
  std::int64_t step;
  torch::nn::Module* module;
  std::vector<torch::Tensor>* out;
  void on_step_end(const FitState& s) {
    if (s.step == step) *out = snapshot(*module);
  }
};

/// A ViT small enough for unit tests (28x28, one channel, patch 7), the same for the same seed.
inline models::ViT tiny_vit(std::uint64_t seed, std::int64_t hidden = 16, std::int64_t layers = 2) {
  torch::manual_seed(seed);
  return models::ViT({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = hidden, .layers = layers,
                      .heads = 2, .intermediate = 2 * hidden, .num_labels = 10});
}

using Batches = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

/// `count` batches of `size` random samples for small_mlp.
inline Batches random_batches(int count, int size, std::uint64_t seed = 2) {
  torch::manual_seed(seed);
  Batches batches;
  for (int i = 0; i < count; ++i)
    batches.emplace_back(torch::randn({size, 6}), torch::randint(0, 3, {size}));
  return batches;
}

/// Gradient accumulation against one large batch: `by_four` (accumulating 4) trains the tiny ViT
/// on 4 micro-batches of 8, `at_once` on the same 32 samples as one batch, from the same weights,
/// with SGD; returns the largest parameter difference after that one optimizer step.
template <class ByFour, class AtOnce>
double accumulated_against_whole(ByFour by_four, AtOnce at_once) {
  torch::manual_seed(30);
  Batches micro;
  for (int i = 0; i < 4; ++i) micro.emplace_back(torch::randn({8, 1, 28, 28}), torch::randint(0, 10, {8}));
  std::vector<torch::Tensor> xs, ys;
  for (auto& [x, y] : micro) xs.push_back(x), ys.push_back(y);
  const Batches whole{{torch::cat(xs), torch::cat(ys)}};
  auto a = tiny_vit(31), b = tiny_vit(31);
  torch::optim::SGD opt_a(by_four.prepare(a), torch::optim::SGDOptions(0.5));
  torch::optim::SGD opt_b(at_once.prepare(b), torch::optim::SGDOptions(0.5));
  if (by_four.fit(a, opt_a, micro).epochs[0].optimizer_steps != 1) return std::numeric_limits<double>::infinity();
  at_once.fit(b, opt_b, whole);
  double worst = 0;
  const auto pa = snapshot(*a), pb = snapshot(*b);
  for (std::size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, (pa[i].to(torch::kFloat) - pb[i].to(torch::kFloat)).abs().max().item<double>());
  return worst;
}

} // namespace ftopt::test
