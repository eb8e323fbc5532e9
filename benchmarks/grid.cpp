// Every valid combination of a policy grid as its own Google Benchmark: one training step of the
// main job's ViT (d 64, 4 layers, 4x4 patches of 28x28, batch 128, AdamW), side by side with the
// fp32 full fine-tuning baseline in the same run (counters: each one's median step time, the
// ratio combination / baseline, peak MiB). The grid is the main job's: precision {fp32, bf16} x
// peft {full, lora, adapter} x memory {none, checkpoint} x quant {none, dynamic-int8} (the quant
// policy converts after training, so its training step is its precision's and peft's). The
// benchmarks are registered by Grid::for_each: one per valid Trainer, none for an excluded one.
//
//   build/benchmarks/bench_grid [--benchmark_filter=fp32]
#include <torch/torch.h>

#include <ftopt.hpp>

#include "machine.hpp"
#include "side_by_side.hpp"

namespace {

namespace grid = ftopt::grid;

using Grid = grid::Grid<grid::Axis<ftopt::precision::Fp32, ftopt::precision::Bf16Mixed>,
                        grid::Axis<ftopt::peft::Full, ftopt::peft::Lora, ftopt::peft::Adapter>,
                        grid::Axis<ftopt::memory::None, ftopt::memory::Checkpoint>, grid::Axis<ftopt::parallel::Single>,
                        grid::Axis<ftopt::quant::None, ftopt::quant::DynamicInt8>>;

const auto settings = grid::Settings(
    ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "key", "value", "dense"},
                       .modules_to_save = {"classifier"}}),
    ftopt::peft::Adapter({.modules_to_save = {"classifier"}}));

ftopt::models::ViT make_vit() {
  torch::manual_seed(0);
  return ftopt::models::ViT({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 64, .layers = 4, .heads = 4,
                             .intermediate = 128, .num_labels = 5});
}

/// A model, its Trainer T built from the grid's settings, an optimizer and one batch.
template <class T>
struct Setup {
  Setup()
      : model(make_vit()),
        trainer(settings.trainer<T>({.device = torch::kCPU, .report_hardware = false})),
        optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-3)),
        batch{torch::randn({128, 1, 28, 28}), torch::randint(0, 5, {128})} {}
  void step() { trainer.train_step(model, optimizer, batch); }

  ftopt::models::ViT model;
  T trainer;
  torch::optim::AdamW optimizer;
  std::pair<torch::Tensor, torch::Tensor> batch;
};

template <class T>
void step_against_baseline(benchmark::State& state) {
  at::set_num_threads(2);
  Setup<ftopt::Trainer<>> baseline;
  Setup<T> combination;
  const std::vector<ftopt::bench::Contender> contenders{{"baseline", [&] { baseline.step(); }},
                                                        {"combination", [&] { combination.step(); }}};
  ftopt::bench::side_by_side(state, contenders, /*warmup=*/2);
  ftopt::bench::record_peaks(state, contenders);
  state.counters["samples_per_s"] = 128 / (state.counters["combination_us"] / 1e6);
}

const bool registered = [] {
  Grid::for_each<ftopt::models::ViT>([]<class T>(const grid::Combination& c) {
    benchmark::RegisterBenchmark(("grid/" + c.key()).c_str(), step_against_baseline<T>)
        ->Iterations(4)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  });
  return true;
}();

} // namespace

FTOPT_BENCHMARK_MAIN();
