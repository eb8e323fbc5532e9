// Step time and peak memory of the precision policies, side by side in one run: Fp32 against
// Bf16Mixed and Bf16True, on the d-256 ViT of bench_python_peer (6 blocks, d = 256, 4 heads, 4x4
// patches of 28x28 images, batch 128, AdamW, 2 threads) and on the main job's small ResNet.
//
//   build/benchmarks/bench_precision --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <torch/torch.h>

#include <ftopt.hpp>

#include "machine.hpp"
#include "models.hpp"
#include "side_by_side.hpp"

namespace {

/// One training setup: its own model, optimizer and Trainer.
template <class Precision, class MakeModel>
struct Setup {
  Setup(MakeModel make, torch::Tensor x, torch::Tensor y)
      : model(make()), trainer({.device = torch::kCPU, .report_hardware = false}),
        optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-4)), batch{std::move(x), std::move(y)} {}
  void step() { trainer.train_step(model, optimizer, batch); }

  decltype(std::declval<MakeModel>()()) model;
  ftopt::Trainer<Precision> trainer;
  torch::optim::AdamW optimizer;
  std::pair<torch::Tensor, torch::Tensor> batch;
};

template <class MakeModel>
void compare(benchmark::State& state, MakeModel make, torch::Tensor x, torch::Tensor y) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  torch::manual_seed(0);
  Setup<ftopt::precision::Fp32, MakeModel> fp32(make, x, y);
  Setup<ftopt::precision::Bf16Mixed, MakeModel> bf16_mixed(make, x, y);
  Setup<ftopt::precision::Bf16True, MakeModel> bf16_true(make, x, y);
  std::vector<ftopt::bench::Contender> contenders = {{"fp32", [&] { fp32.step(); }},
                                                     {"bf16_mixed", [&] { bf16_mixed.step(); }},
                                                     {"bf16_true", [&] { bf16_true.step(); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
  ftopt::bench::record_peaks(state, contenders);
}

void BM_ViTStep(benchmark::State& state) {
  compare(
      state,
      [] {
        return ftopt::models::ViT(ftopt::bench::vit_d256);
      },
      torch::randn({128, 1, 28, 28}), torch::randint(0, 10, {128}));
}

void BM_ResNetStep(benchmark::State& state) {
  compare(
      state,
      [] {
        return ftopt::models::ResNet({.layers = {1, 1, 1, 1}, .widths = {16, 32, 64, 128}, .in_channels = 1,
                                      .num_classes = 10, .stem = ftopt::models::ResNetStem::Small});
      },
      torch::randn({128, 1, 28, 28}), torch::randint(0, 10, {128}));
}

} // namespace

BENCHMARK(BM_ViTStep)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_ResNetStep)->Unit(benchmark::kMillisecond)->Iterations(5);
FTOPT_BENCHMARK_MAIN();
