// What each of ftopt's own choices in the ViT step buys, side by side in one run: the same
// training step (the d-256 ViT of bench_python_peer: 6 blocks, 4 heads, MLP 1024, 50 tokens,
// batch 128, AdamW, all CPUs) with everything on, then with one choice turned back to what
// Python does: ATen's fused SDPA kernel instead of the written-out attention
// (compat::AttentionKernel), query, key and value as three GEMMs instead of one
// (nn::shared_input_linears_enabled), and for LoRA the branches added layer by layer instead of
// one GEMM over the merged weight (nn::low_rank_linears_enabled); LoRA also on the main job's ViT
// (d 128, 4 blocks, MLP 512) with every Linear of the blocks adapted. Twin models with the same
// weights; the switches are process-wide and set before each contender's step. Counters: medians
// (µs) and ratios to "ftopt".
//
//   build/benchmarks/bench_step_parts
#include <type_traits>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "machine.hpp"
#include "models.hpp"
#include "side_by_side.hpp"

namespace {

/// ftopt's choices, each on (as shipped) or turned back to what Python does.
struct Choices {
  ftopt::compat::AttentionKernel attention = ftopt::compat::AttentionKernel::Auto;
  bool shared_qkv = true;
  bool low_rank = true;
};

template <class Precision, class Peft>
struct Setup {
  Setup(Peft peft, const ftopt::models::ViTOptions& vit)
      : model((torch::manual_seed(0), ftopt::models::ViT(vit))),
        trainer({.device = torch::kCPU, .report_hardware = false}, {}, std::move(peft)),
        optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-4)),
        batch{torch::randn({128, 1, 28, 28}), torch::randint(0, vit.num_labels, {128})} {}
  void step(Choices choices) {
    ftopt::compat::attention_kernel() = choices.attention;
    ftopt::nn::shared_input_linears_enabled() = choices.shared_qkv;
    ftopt::nn::low_rank_linears_enabled() = choices.low_rank;
    trainer.train_step(model, optimizer, batch);
    ftopt::compat::attention_kernel() = ftopt::compat::AttentionKernel::Auto;
    ftopt::nn::shared_input_linears_enabled() = true;
    ftopt::nn::low_rank_linears_enabled() = true;
  }
  ftopt::models::ViT model;
  ftopt::Trainer<Precision, Peft> trainer;
  torch::optim::AdamW optimizer;
  std::pair<torch::Tensor, torch::Tensor> batch;
};

template <class Precision, class Peft>
void compare(benchmark::State& state, const Peft& peft, const ftopt::models::ViTOptions& vit = ftopt::bench::vit_d256) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  constexpr bool lora = std::is_same_v<Peft, ftopt::peft::Lora>;
  Setup<Precision, Peft> all(peft, vit), fused_sdpa(peft, vit), separate(peft, vit), layer_by_layer(peft, vit);
  std::vector<ftopt::bench::Contender> contenders = {
      {"ftopt", [&] { all.step({}); }},
      {"fused_sdpa", [&] { fused_sdpa.step({.attention = ftopt::compat::AttentionKernel::Fused}); }},
      {"separate_qkv", [&] { separate.step({.shared_qkv = false}); }}};
  if (lora) contenders.push_back({"lora_layer_by_layer", [&] { layer_by_layer.step({.low_rank = false}); }});
  ftopt::bench::side_by_side(state, contenders, 1);
}

ftopt::peft::Lora lora(ftopt::nn::NamePatterns targets = {"query", "value"}) {
  return ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = std::move(targets), .modules_to_save = {"classifier"}});
}

void BM_Bf16Lora(benchmark::State& state) { compare<ftopt::precision::Bf16Mixed>(state, lora()); }
void BM_Bf16LoraAllMainJob(benchmark::State& state) {
  compare<ftopt::precision::Bf16Mixed>(state, lora({"query", "key", "value", "dense"}), ftopt::bench::vit_main);
}
void BM_Fp32LoraAllMainJob(benchmark::State& state) {
  compare<ftopt::precision::Fp32>(state, lora({"query", "key", "value", "dense"}), ftopt::bench::vit_main);
}
void BM_Bf16Full(benchmark::State& state) { compare<ftopt::precision::Bf16Mixed>(state, ftopt::peft::Full{}); }
void BM_Fp32Full(benchmark::State& state) { compare<ftopt::precision::Fp32>(state, ftopt::peft::Full{}); }

} // namespace

BENCHMARK(BM_Bf16Lora)->Unit(benchmark::kMillisecond)->Iterations(12);
BENCHMARK(BM_Bf16LoraAllMainJob)->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK(BM_Fp32LoraAllMainJob)->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_Bf16Full)->Unit(benchmark::kMillisecond)->Iterations(12);
BENCHMARK(BM_Fp32Full)->Unit(benchmark::kMillisecond)->Iterations(4);
FTOPT_BENCHMARK_MAIN();
