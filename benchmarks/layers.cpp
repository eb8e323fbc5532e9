// What ftopt's drop-in layers cost when nothing is attached: nn::Linear and nn::Conv2d against
// torch::nn::Linear and torch::nn::Conv2d with the same weights, forward and backward,
// alternating which runs first, timed side by side (counters: median of each, and the ratio).
//
//   build/benchmarks/bench_layers --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <algorithm>
#include <chrono>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <ftopt/nn/conv2d.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/weights/state_dict.hpp>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

template <class Theirs, class Ours>
void side_by_side(benchmark::State& state, Theirs theirs, Ours ours, torch::Tensor x) {
  at::set_num_threads(1);
  ftopt::weights::load_state_dict(*ours, ftopt::weights::state_dict(*theirs));
  x.requires_grad_(true);
  auto step = [&](auto& layer) {
    auto y = layer->forward(x);
    y.sum().backward();
    for (auto& p : layer->parameters()) p.mutable_grad().reset();
    x.mutable_grad().reset();
  };
  std::vector<double> torch_s, ftopt_s;
  bool ours_first = false;
  auto time = [&](auto& layer, std::vector<double>& into) {
    auto t0 = Clock::now();
    step(layer);
    into.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  };
  for (int i = 0; i < 5; ++i) step(theirs), step(ours);
  for (auto _ : state) {
    if (ours_first) time(ours, ftopt_s), time(theirs, torch_s);
    else time(theirs, torch_s), time(ours, ftopt_s);
    ours_first = !ours_first;
  }
  state.counters["torch_us"] = median(torch_s) * 1e6;
  state.counters["ftopt_us"] = median(ftopt_s) * 1e6;
  state.counters["ratio"] = median(ftopt_s) / median(torch_s);
}

void BM_LinearSmall(benchmark::State& state) {  // where a per-call overhead would show
  torch::manual_seed(0);
  side_by_side(state, torch::nn::Linear(64, 64), ftopt::nn::Linear(64, 64), torch::randn({8, 64}));
}
void BM_LinearLarge(benchmark::State& state) {
  torch::manual_seed(0);
  side_by_side(state, torch::nn::Linear(512, 512), ftopt::nn::Linear(512, 512), torch::randn({256, 512}));
}
void BM_Conv2d(benchmark::State& state) {
  torch::manual_seed(0);
  auto options = torch::nn::Conv2dOptions(16, 32, 3).padding(1).bias(false);
  side_by_side(state, torch::nn::Conv2d(options), ftopt::nn::Conv2d(options), torch::randn({8, 16, 28, 28}));
}

} // namespace

BENCHMARK(BM_LinearSmall)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_LinearLarge)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_Conv2d)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK_MAIN();
