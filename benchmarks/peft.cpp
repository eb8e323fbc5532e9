// Step time and peak memory of the PEFT policies against full fine-tuning, side by side in one
// run, on the ViT of benchmarks/precision.cpp (6 blocks, d 256, 4 heads, 4x4 patches of 28x28,
// batch 128, AdamW, 2 threads), in fp32 and under Bf16Mixed; with each one's trainable share.
//
//   build/benchmarks/bench_peft
#include <torch/torch.h>

#include <ftopt.hpp>

#include "models.hpp"
#include "side_by_side.hpp"

namespace {

ftopt::models::ViT make_vit() {
  return ftopt::models::ViT(ftopt::bench::vit_d256);
}

template <class Precision, class Peft>
struct Setup {
  explicit Setup(Peft peft)
      : model((torch::manual_seed(0), make_vit())),
        trainer({.device = torch::kCPU, .report_hardware = false}, {}, std::move(peft)),
        optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-4)),
        batch{torch::randn({128, 1, 28, 28}), torch::randint(0, 10, {128})} {}
  void step() { trainer.train_step(model, optimizer, batch); }
  double trainable_share() const {
    std::int64_t t = 0, n = 0;
    for (const auto& p : model->parameters()) n += p.numel(), t += p.requires_grad() ? p.numel() : 0;
    return static_cast<double>(t) / static_cast<double>(n);
  }

  ftopt::models::ViT model;
  ftopt::Trainer<Precision, Peft> trainer;
  torch::optim::AdamW optimizer;
  std::pair<torch::Tensor, torch::Tensor> batch;
};

template <class Precision>
void compare(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  Setup<Precision, ftopt::peft::Full> full({});
  Setup<Precision, ftopt::peft::Lora> lora(ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "value"},
                                                              .modules_to_save = {"classifier"}}));
  Setup<Precision, ftopt::peft::Adapter> adapter(ftopt::peft::Adapter({.reduction_factor = 16, .modules_to_save = {"classifier"}}));
  Setup<Precision, ftopt::peft::Prefix> prefix(ftopt::peft::Prefix({.num_virtual_tokens = 10, .modules_to_save = {"classifier"}}));
  std::vector<ftopt::bench::Contender> contenders = {{"full", [&] { full.step(); }},
                                                     {"lora", [&] { lora.step(); }},
                                                     {"adapter", [&] { adapter.step(); }},
                                                     {"prefix", [&] { prefix.step(); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
  ftopt::bench::record_peaks(state, contenders);
  state.counters["lora_trainable_pct"] = 100 * lora.trainable_share();
  state.counters["adapter_trainable_pct"] = 100 * adapter.trainable_share();
  state.counters["prefix_trainable_pct"] = 100 * prefix.trainable_share();
}

void BM_Fp32(benchmark::State& state) { compare<ftopt::precision::Fp32>(state); }
void BM_Bf16Mixed(benchmark::State& state) { compare<ftopt::precision::Bf16Mixed>(state); }

} // namespace

BENCHMARK(BM_Fp32)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Bf16Mixed)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_MAIN();
