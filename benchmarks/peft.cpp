// Step time and peak memory of the PEFT policies against full fine-tuning, side by side in one
// run, on the ViT of benchmarks/precision.cpp (6 blocks, d 256, 4 heads, 4x4 patches of 28x28,
// batch 128, AdamW, 2 threads), in fp32 and under Bf16Mixed; with each one's trainable share.
// Then LoRA on every block Linear over a float, an int8 and an NF4 frozen base (peft::QLora);
// and DoRA on every block Linear as one GEMM (peft's adapter kernel) against PEFT's form of it
// (the same model with KernelOptions::merged_weight off) and against LoRA; and the wide ranks (VeRA
// r 256 and LoRA r 64 on every block Linear) the same way; and IA3 with its feedforward targets as
// one GEMM over W diag(l) against its PEFT form.
//
//   build/benchmarks/bench_peft

#include <torch/torch.h>

#include <ftopt.hpp>

#include "machine.hpp"
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

/// `options` with ftopt's kernels as given (off: PEFT's form, or each layer on a shared input alone).
template <class Options>
Options with_kernel(Options options, ftopt::KernelOptions kernel) {
  options.kernel = kernel;
  return options;
}
constexpr ftopt::KernelOptions peft_form{.merged_weight = false};
constexpr ftopt::KernelOptions one_by_one{.shared_input = false};

/// MiB of a module's parameters and buffers.
double model_mib(torch::nn::Module& module) {
  std::int64_t bytes = 0;
  for (const auto& p : module.parameters()) bytes += static_cast<std::int64_t>(p.nbytes());
  for (const auto& b : module.buffers()) bytes += static_cast<std::int64_t>(b.nbytes());
  return static_cast<double>(bytes) / (1 << 20);
}

/// LoRA r 8 on every block Linear (the main job's rows) under Bf16Mixed, over a float base and
/// over the same base held in int8 per channel and in NF4: step time, step peak, the frozen
/// bases' MiB and the whole model's.
void BM_QuantizedBaseBf16Mixed(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  using Bf16 = ftopt::precision::Bf16Mixed;
  const ftopt::peft::LoraOptions all{.r = 8, .alpha = 16, .targets = {"query", "key", "value", "dense"},
                                     .modules_to_save = {"classifier"}};
  Setup<Bf16, ftopt::peft::Lora> lora(all);
  Setup<Bf16, ftopt::peft::QLora<ftopt::storage::Int8PerChannel>> int8(all), int8_apart(with_kernel(all, one_by_one));
  Setup<Bf16, ftopt::peft::QLora<ftopt::storage::Nf4>> nf4(all), nf4_apart(with_kernel(all, one_by_one));
  std::vector<ftopt::bench::Contender> contenders = {{"lora", [&] { lora.step(); }},
                                                     {"int8_base", [&] { int8.step(); }},
                                                     {"nf4_base", [&] { nf4.step(); }},
                                                     {"int8_base_one_by_one", [&] { int8_apart.step(); }},
                                                     {"nf4_base_one_by_one", [&] { nf4_apart.step(); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
  ftopt::bench::record_peaks(state, contenders);
  const auto mib = [](std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  state.counters["float_base_MiB"] = mib(nf4.trainer.peft().float_base_bytes());
  state.counters["int8_base_MiB"] = mib(int8.trainer.peft().base_bytes());
  state.counters["nf4_base_MiB"] = mib(nf4.trainer.peft().base_bytes());
  state.counters["int8_base_ratio"] = state.counters["int8_base_MiB"] / state.counters["float_base_MiB"];
  state.counters["nf4_base_ratio"] = state.counters["nf4_base_MiB"] / state.counters["float_base_MiB"];
  state.counters["lora_model_MiB"] = model_mib(*lora.model);
  state.counters["int8_model_MiB"] = model_mib(*int8.model);
  state.counters["nf4_model_MiB"] = model_mib(*nf4.model);
}

/// LoRA and DoRA, r 8 on every block Linear (the main job's rows), under Bf16Mixed: DoRA as one
/// GEMM over its rescaled merged weight, and in PEFT's form (the base's output, the branch's, the
/// rescaling and the sum as separate passes: KernelOptions::merged_weight off).
void BM_DoraBf16Mixed(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  using Bf16 = ftopt::precision::Bf16Mixed;
  ftopt::peft::LoraOptions all{.r = 8, .alpha = 16, .targets = {"query", "key", "value", "dense"},
                               .modules_to_save = {"classifier"}};
  Setup<Bf16, ftopt::peft::Lora> lora(all);
  all.dora = true;
  Setup<Bf16, ftopt::peft::Lora> dora(all), dora_peft_form(with_kernel(all, peft_form));
  std::vector<ftopt::bench::Contender> contenders = {{"lora", [&] { lora.step(); }},
                                                     {"dora", [&] { dora.step(); }},
                                                     {"dora_peft_form", [&] { dora_peft_form.step(); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
  ftopt::bench::record_peaks(state, contenders);
}

/// Ranks wide for their layers (d 256, MLP 512): VeRA r 256 (the main job's row) and LoRA r 64
/// (PEFT's MetaMathQA comparison) on every block Linear under Bf16Mixed, through
/// peft's adapter kernel and in PEFT's form (KernelOptions::merged_weight off), beside LoRA r 8.
void BM_WideRankBf16Mixed(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  using Bf16 = ftopt::precision::Bf16Mixed;
  const ftopt::nn::NamePatterns every = {"query", "key", "value", "dense"};
  Setup<Bf16, ftopt::peft::Lora> lora(ftopt::peft::LoraOptions{.r = 8, .alpha = 16, .targets = every,
                                                               .modules_to_save = {"classifier"}});
  const ftopt::peft::LoraOptions wide{.r = 64, .alpha = 128, .targets = every, .modules_to_save = {"classifier"}};
  Setup<Bf16, ftopt::peft::Lora> lora64(wide), lora64_peft_form(with_kernel(wide, peft_form));
  const ftopt::peft::VeraOptions vera_options{.r = 256, .targets = every, .modules_to_save = {"classifier"}};
  Setup<Bf16, ftopt::peft::Vera> vera(vera_options), vera_peft_form(with_kernel(vera_options, peft_form));
  std::vector<ftopt::bench::Contender> contenders = {{"lora_r8", [&] { lora.step(); }},
                                                     {"lora_r64", [&] { lora64.step(); }},
                                                     {"lora_r64_peft_form", [&] { lora64_peft_form.step(); }},
                                                     {"vera_r256", [&] { vera.step(); }},
                                                     {"vera_r256_peft_form", [&] { vera_peft_form.step(); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
  ftopt::bench::record_peaks(state, contenders);
}

/// IA3 on keys, values and the MLP's intermediate activations (the main job's row) under
/// Bf16Mixed, its feedforward targets as one GEMM over W diag(l) (peft's adapter kernel) and in
/// PEFT's form (KernelOptions::merged_weight off), beside LoRA r 8 on every block Linear.
void BM_Ia3Bf16Mixed(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  using Bf16 = ftopt::precision::Bf16Mixed;
  Setup<Bf16, ftopt::peft::Lora> lora(ftopt::peft::LoraOptions{.r = 8, .alpha = 16,
                                                               .targets = {"query", "key", "value", "dense"},
                                                               .modules_to_save = {"classifier"}});
  const ftopt::nn::NamePattern mlp_output = ftopt::nn::regex(R"((.*\.)?layer\.\d+\.output\.dense)");
  const ftopt::peft::Ia3Options ia3_options{.targets = {"key", "value", mlp_output}, .feedforward = {mlp_output},
                                           .modules_to_save = {"classifier"}};
  Setup<Bf16, ftopt::peft::Ia3> ia3(ia3_options), ia3_peft_form(with_kernel(ia3_options, peft_form));
  std::vector<ftopt::bench::Contender> contenders = {{"lora_r8", [&] { lora.step(); }},
                                                     {"ia3", [&] { ia3.step(); }},
                                                     {"ia3_peft_form", [&] { ia3_peft_form.step(); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
  ftopt::bench::record_peaks(state, contenders);
}

} // namespace

BENCHMARK(BM_Fp32)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Bf16Mixed)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_QuantizedBaseBf16Mixed)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_DoraBf16Mixed)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_WideRankBf16Mixed)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Ia3Bf16Mixed)->Unit(benchmark::kMillisecond)->Iterations(3);
FTOPT_BENCHMARK_MAIN();
