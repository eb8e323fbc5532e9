// What ftopt's drop-in layers cost when nothing is attached: nn::Linear and nn::Conv2d against
// torch::nn::Linear and torch::nn::Conv2d with the same weights, forward and backward,
// alternating which runs first, timed side by side (counters: median of each, and the ratio).
//
//   build/benchmarks/bench_layers --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <ftopt/nn/conv2d.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/weights/state_dict.hpp>

#include "machine.hpp"
#include "side_by_side.hpp"

namespace {

template <class Theirs, class Ours>
void compare(benchmark::State& state, Theirs theirs, Ours ours, torch::Tensor x) {
  at::set_num_threads(ftopt::bench::bench_threads());  // FTOPT_BENCH_THREADS, as the results say
  ftopt::weights::load_state_dict(*ours, ftopt::weights::state_dict(*theirs));
  x.requires_grad_(true);
  auto step = [&](auto& layer) {
    auto y = layer->forward(x);
    y.sum().backward();
    for (auto& p : layer->parameters()) p.mutable_grad().reset();
    x.mutable_grad().reset();
  };
  ftopt::bench::side_by_side(state, {{"torch", [&] { step(theirs); }}, {"ftopt", [&] { step(ours); }}}, 5);
}

void BM_LinearSmall(benchmark::State& state) {  // where a per-call overhead would show
  torch::manual_seed(0);
  compare(state, torch::nn::Linear(64, 64), ftopt::nn::Linear(64, 64), torch::randn({8, 64}));
}
void BM_LinearLarge(benchmark::State& state) {
  torch::manual_seed(0);
  compare(state, torch::nn::Linear(512, 512), ftopt::nn::Linear(512, 512), torch::randn({256, 512}));
}
void BM_Conv2d(benchmark::State& state) {
  torch::manual_seed(0);
  auto options = torch::nn::Conv2dOptions(16, 32, 3).padding(1).bias(false);
  compare(state, torch::nn::Conv2d(options), ftopt::nn::Conv2d(options), torch::randn({8, 16, 28, 28}));
}

} // namespace

BENCHMARK(BM_LinearSmall)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_LinearLarge)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
BENCHMARK(BM_Conv2d)->Unit(benchmark::kMicrosecond)->MinTime(1.0);
FTOPT_BENCHMARK_MAIN();
