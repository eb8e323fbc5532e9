// What each of ftopt's own choices in the ViT step buys, side by side in one run: the same
// training step (the d-256 ViT of bench_python_peer: 6 blocks, 4 heads, MLP 1024, 50 tokens,
// batch 128, AdamW, all CPUs) with everything on, then with one choice turned back to what
// Python does: ATen's fused SDPA kernel instead of the written-out attention
// (KernelOptions::attention), query, key and value as three GEMMs instead of one
// (KernelOptions::shared_input, of the model and of LoRA), and for LoRA the branches added layer by
// layer instead of one GEMM over the merged weight (KernelOptions::merged_weight); LoRA also on the
// main job's ViT (d 128, 4 blocks, MLP 512) with every Linear of the blocks adapted. Twin models
// with the same weights, each built with its choices (ftopt::KernelOptions). Counters: medians
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
  ftopt::AttentionKernel attention = ftopt::AttentionKernel::Auto;
  bool shared_qkv = true;
  bool low_rank = true;
};

/// The choices as kernel options, of the model and of a LoRA policy.
ftopt::KernelOptions kernel_options(const Choices& choices) {
  return {.merged_weight = choices.low_rank, .shared_input = choices.shared_qkv, .attention = choices.attention};
}
template <class Peft>
Peft with_choices(Peft peft, const Choices& choices) {
  if constexpr (std::is_same_v<Peft, ftopt::peft::Lora>) {
    auto options = peft.options();
    options.kernel = kernel_options(choices);
    return ftopt::peft::Lora(options);
  } else {
    return peft;
  }
}
ftopt::models::ViTOptions with_choices(ftopt::models::ViTOptions vit, const Choices& choices) {
  vit.kernel = kernel_options(choices);
  return vit;
}

template <class Precision, class Peft>
struct Setup {
  Setup(Peft peft, const ftopt::models::ViTOptions& vit, Choices choices = {})
      : model((torch::manual_seed(0), ftopt::models::ViT(with_choices(vit, choices)))),
        trainer({.device = torch::kCPU, .report_hardware = false}, {}, with_choices(std::move(peft), choices)),
        optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-4)),
        batch{torch::randn({128, 1, 28, 28}), torch::randint(0, vit.num_labels, {128})} {}
  void step() { trainer.train_step(model, optimizer, batch); }
  ftopt::models::ViT model;
  ftopt::Trainer<Precision, Peft> trainer;
  torch::optim::AdamW optimizer;
  std::pair<torch::Tensor, torch::Tensor> batch;
};

template <class Precision, class Peft>
void compare(benchmark::State& state, const Peft& peft, const ftopt::models::ViTOptions& vit = ftopt::bench::vit_d256) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  constexpr bool lora = std::is_same_v<Peft, ftopt::peft::Lora>;
  Setup<Precision, Peft> all(peft, vit), fused_sdpa(peft, vit, {.attention = ftopt::AttentionKernel::Fused}),
      separate(peft, vit, {.shared_qkv = false}), layer_by_layer(peft, vit, {.low_rank = false});
  std::vector<ftopt::bench::Contender> contenders = {
      {"ftopt", [&] { all.step(); }},
      {"fused_sdpa", [&] { fused_sdpa.step(); }},
      {"separate_qkv", [&] { separate.step(); }}};
  if (lora) contenders.push_back({"lora_layer_by_layer", [&] { layer_by_layer.step(); }});
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
