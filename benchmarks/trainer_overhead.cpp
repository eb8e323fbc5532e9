// What the Trainer costs over a hand-written LibTorch loop doing the same work.
//
// Each benchmark alternates one hand-written step and one Trainer<> step on twin models (same
// weights, same batch), timing each, so machine noise hits both alike; the counters give the
// median step of each and their ratio (trainer_ratio = trainer / hand). The hand-written loop does what
// Trainer<> does per step: forward, cross-entropy, gradients set to none, backward,
// optimizer step, and the running loss and top-1 counts kept as tensors.
//
//   build/benchmarks/bench_trainer_overhead --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true   (one command line)
#include <cstdlib>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <ftopt.hpp>

#include "machine.hpp"
#include "models.hpp"
#include "side_by_side.hpp"

namespace {

/// The hand-written step: the PyTorch tutorial loop plus the metrics a real loop keeps.
struct HandLoop {
  torch::optim::Optimizer& optimizer;
  std::vector<torch::Tensor> params;
  torch::Tensor loss_sum, correct;

  template <class M>
  void step(M& model, const torch::Tensor& x, const torch::Tensor& y) {
    auto out = model->forward(x);
    auto loss = torch::nn::functional::cross_entropy(out, y);
    (void)loss.template item<double>();  // the finite-loss check Trainer<> makes
    loss.backward();
    optimizer.step();
    for (auto& p : params) p.mutable_grad().reset();
    loss_sum.add_(loss.detach(), static_cast<double>(x.size(0)));
    correct.add_(out.argmax(1).eq(y).sum());
  }
};

/// The CPU, or CUDA when FTOPT_DEVICE=cuda (benchmarks/gpu/run.sh sets it).
torch::Device bench_device() {
  const char* name = std::getenv("FTOPT_DEVICE");
  return name ? torch::Device(name) : torch::Device(torch::kCPU);
}

template <class MakeModel>
void compare(benchmark::State& state, MakeModel make_model, torch::Tensor x, torch::Tensor y) {
  at::set_num_threads(ftopt::bench::bench_threads());  // FTOPT_BENCH_THREADS, as the results say
  const auto device = bench_device();
  x = x.to(device), y = y.to(device);
  torch::manual_seed(0);
  auto hand_model = make_model();
  hand_model->to(device);
  torch::manual_seed(0);
  auto trainer_model = make_model();
  ftopt::Trainer<> trainer({.device = device, .report_hardware = false});
  torch::optim::AdamW trainer_opt(trainer.prepare(trainer_model), torch::optim::AdamWOptions(1e-4));
  torch::optim::AdamW hand_opt(hand_model->parameters(), torch::optim::AdamWOptions(1e-4));
  const auto sums = torch::TensorOptions().dtype(torch::kDouble).device(device);
  HandLoop hand{hand_opt, hand_model->parameters(), torch::zeros({}, sums), torch::zeros({}, sums)};
  const std::pair<torch::Tensor, torch::Tensor> batch{x, y};
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  ftopt::bench::side_by_side(state, {{"hand", [&] { hand.step(hand_model, x, y), sync(); }},
                                     {"trainer", [&] { trainer.train_step(trainer_model, trainer_opt, batch), sync(); }}},
                             5);
}

void BM_MlpStep(benchmark::State& state) {
  // The tiny MLP of the issue: 784-64-10, batch 32 - where framework overhead shows most.
  compare(state, [] { return ftopt::models::Mlp({.in = 784, .hidden = {64}, .out = 10}); },
               torch::randn({32, 784}), torch::randint(0, 10, {32}));
}

void BM_TransformerStep(benchmark::State& state) {
  // 4 pre-norm blocks, width 64, 4 heads, 16 tokens of 49 features, batch 16.
  compare(state, [] { return ftopt::bench::Transformer(49, 64, 4, 4, 10); },
               torch::randn({16, 16, 49}), torch::randint(0, 10, {16}));
}

} // namespace

BENCHMARK(BM_MlpStep)->Unit(benchmark::kMicrosecond)->MinTime(2.0);
BENCHMARK(BM_TransformerStep)->Unit(benchmark::kMicrosecond)->MinTime(2.0);
FTOPT_BENCHMARK_MAIN();
