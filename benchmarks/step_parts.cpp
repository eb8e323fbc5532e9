// What each of ftopt's own choices in the ViT step buys, side by side in one run: the same
// training step (the d-256 ViT of bench_python_peer: 6 blocks, 4 heads, MLP 1024, 50 tokens,
// batch 128, AdamW, all CPUs) with everything on, then with one choice turned back to what
// Python does: ATen's fused SDPA kernel instead of the written-out attention
// (compat::AttentionKernel), and query, key and value as three GEMMs instead of one
// (nn::shared_input_linears_enabled). Twin models with the same weights; the switches are
// process-wide and set before each contender's step. Counters: medians (µs) and ratios to "ftopt".
//
//   build/benchmarks/bench_step_parts
#include <torch/torch.h>

#include <ftopt.hpp>

#include "models.hpp"
#include "side_by_side.hpp"

namespace {

template <class Precision, class Peft>
struct Setup {
  explicit Setup(Peft peft)
      : model((torch::manual_seed(0),
               ftopt::models::ViT(ftopt::bench::vit_d256))),
        trainer({.device = torch::kCPU, .report_hardware = false}, {}, std::move(peft)),
        optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-4)),
        batch{torch::randn({128, 1, 28, 28}), torch::randint(0, 10, {128})} {}
  void step(ftopt::compat::AttentionKernel kernel, bool shared) {
    ftopt::compat::attention_kernel() = kernel;
    ftopt::nn::shared_input_linears_enabled() = shared;
    trainer.train_step(model, optimizer, batch);
    ftopt::compat::attention_kernel() = ftopt::compat::AttentionKernel::Auto;
    ftopt::nn::shared_input_linears_enabled() = true;
  }
  ftopt::models::ViT model;
  ftopt::Trainer<Precision, Peft> trainer;
  torch::optim::AdamW optimizer;
  std::pair<torch::Tensor, torch::Tensor> batch;
};

template <class Precision, class Peft>
void compare(benchmark::State& state, const Peft& peft) {
  using ftopt::compat::AttentionKernel;
  at::set_num_threads(ftopt::hardware::available_cpus());
  Setup<Precision, Peft> all(peft), fused_sdpa(peft), separate(peft);
  std::vector<ftopt::bench::Contender> contenders = {
      {"ftopt", [&] { all.step(AttentionKernel::Auto, true); }},
      {"fused_sdpa", [&] { fused_sdpa.step(AttentionKernel::Fused, true); }},
      {"separate_qkv", [&] { separate.step(AttentionKernel::Auto, false); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
}

ftopt::peft::Lora lora() { return ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "value"}}); }

void BM_Bf16Lora(benchmark::State& state) { compare<ftopt::precision::Bf16Mixed>(state, lora()); }
void BM_Bf16Full(benchmark::State& state) { compare<ftopt::precision::Bf16Mixed>(state, ftopt::peft::Full{}); }
void BM_Fp32Full(benchmark::State& state) { compare<ftopt::precision::Fp32>(state, ftopt::peft::Full{}); }

} // namespace

BENCHMARK(BM_Bf16Lora)->Unit(benchmark::kMillisecond)->Iterations(12);
BENCHMARK(BM_Bf16Full)->Unit(benchmark::kMillisecond)->Iterations(12);
BENCHMARK(BM_Fp32Full)->Unit(benchmark::kMillisecond)->Iterations(4);
BENCHMARK_MAIN();
