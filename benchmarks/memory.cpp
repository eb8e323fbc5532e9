// Memory policies side by side in one run: step time, peak memory and the activations kept for
// the backward, with and without checkpointing on a 12-block ViT; plain against chunked
// attention at a long sequence; the largest batch that fits a fixed memory budget; and AdamW
// against optim::AdamW8bit on the d-256 ViT (state memory and step time; the whole peak of
// AdamW8bit stepped in the backward over the batch size); the LM head's loss at SmolLM2's
// vocabulary with the logits made whole and with the fused linear cross-entropy.
//
//   build/benchmarks/bench_memory
//
// Memory is the tracking allocator's (memory::PeakMemory): live tensor bytes, CPU.
#include <functional>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/loss/causal_lm.hpp>

#include "machine.hpp"
#include "models.hpp"
#include "side_by_side.hpp"

namespace {

using Options = ftopt::models::ViTOptions;

/// One training setup: its own model, optimizer and Trainer with memory policy `Memory`.
template <class Memory, class Optimizer = torch::optim::AdamW, class Precision = ftopt::precision::Fp32>
struct Setup {
  Setup(const Options& options, Memory memory, std::int64_t batch)
      : model((torch::manual_seed(0), ftopt::models::ViT(options))),
        trainer({.device = torch::kCPU, .report_hardware = false}, {}, {}, std::move(memory)),
        optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-4)),
        batch{torch::randn({batch, options.channels, options.image_size, options.image_size}),
              torch::randint(0, options.num_labels, {batch})} {}
  void step() { trainer.train_step(model, optimizer, batch); }

  /// MiB the forward keeps for the backward (live after forward and loss, before backward).
  double saved_mib() {
    ftopt::memory::PeakMemory::reset();
    const auto before = ftopt::memory::PeakMemory::current();
    auto loss = torch::nn::functional::cross_entropy(model->forward(batch.first), batch.second);
    return static_cast<double>(ftopt::memory::PeakMemory::current() - before) / (1 << 20);
  }

  ftopt::models::ViT model;
  ftopt::Trainer<Precision, ftopt::peft::Full, Memory> trainer;
  Optimizer optimizer;
  std::pair<torch::Tensor, torch::Tensor> batch;
};

/// 12 blocks, d 128, 4x4 patches of 28x28 (50 tokens), batch 64.
const Options deep{.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 128, .layers = 12, .heads = 4,
                   .intermediate = 512, .num_labels = 10};

void BM_CheckpointViT12(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  Setup<ftopt::memory::None> plain(deep, {}, 64);
  Setup<ftopt::memory::Checkpoint> every_block(deep, {.every = 1}, 64);
  Setup<ftopt::memory::Checkpoint> every_other(deep, {.every = 2}, 64);
  std::vector<ftopt::bench::Contender> contenders = {{"plain", [&] { plain.step(); }},
                                                     {"checkpoint_all", [&] { every_block.step(); }},
                                                     {"checkpoint_half", [&] { every_other.step(); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
  ftopt::bench::record_peaks(state, contenders);
  state.counters["plain_saved_MiB"] = plain.saved_mib();
  state.counters["checkpoint_all_saved_MiB"] = every_block.saved_mib();
  state.counters["checkpoint_half_saved_MiB"] = every_other.saved_mib();
}

/// 2 blocks, d 64, 2x2 patches of 56x56 (785 tokens), batch 4: attention dominates.
Options long_sequence(ftopt::models::AttnImplementation kind) {
  return {.image_size = 56, .patch_size = 2, .channels = 1, .hidden = 64, .layers = 2, .heads = 4,
          .intermediate = 128, .num_labels = 10, .attn_implementation = kind, .attention_chunk = 128};
}

void BM_ChunkedAttention785(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  using ftopt::models::AttnImplementation;
  Setup<ftopt::memory::None> sdpa(long_sequence(AttnImplementation::Sdpa), {}, 4);
  Setup<ftopt::memory::None> chunked(long_sequence(AttnImplementation::Chunked), {}, 4);
  Setup<ftopt::memory::Checkpoint> both(long_sequence(AttnImplementation::Chunked), {.every = 1}, 4);
  std::vector<ftopt::bench::Contender> contenders = {{"sdpa", [&] { sdpa.step(); }},
                                                     {"chunked", [&] { chunked.step(); }},
                                                     {"chunked_checkpoint", [&] { both.step(); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
  ftopt::bench::record_peaks(state, contenders);
}

/// The largest batch whose training step (forward, backward, AdamW) peaks under `budget_mib`:
/// doubling, then bisection, each probe one measured step.
template <class Memory>
std::int64_t largest_batch(const Options& options, Memory memory, double budget_mib) {
  auto fits = [&](std::int64_t batch) {
    Setup<Memory> setup(options, memory, batch);
    return ftopt::bench::peak_mib([&] { setup.step(); }) <= budget_mib;
  };
  std::int64_t good = 0, bad = 1;
  while (fits(bad)) good = std::exchange(bad, 2 * bad);
  while (bad - good > 1) {
    const std::int64_t mid = (good + bad) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good;
}

void BM_LargestBatchUnder256MiB(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  const Options options{.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 64, .layers = 12, .heads = 4,
                        .intermediate = 256, .num_labels = 10};
  for (auto _ : state) {
    state.counters["plain_batch"] = static_cast<double>(largest_batch(options, ftopt::memory::None{}, 256));
    state.counters["checkpoint_batch"] =
        static_cast<double>(largest_batch(options, ftopt::memory::Checkpoint{.every = 1}, 256));
  }
}

/// MiB AdamW's moments take (exp_avg and exp_avg_sq of every parameter it has stepped).
double adamw_state_mib(const torch::optim::AdamW& optimizer) {
  std::int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state()) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
    bytes += (s.exp_avg().numel() + s.exp_avg_sq().numel()) * static_cast<std::int64_t>(s.exp_avg().element_size());
  }
  return static_cast<double>(bytes) / (1 << 20);
}

/// MiB live at the peak of a training step of a setup built alone (model, optimizer state,
/// gradients, activations): everything it allocates is tracked.
template <class Memory, class Optimizer>
double whole_step_peak_mib(Memory memory, std::int64_t batch = 64) {
  using ftopt::memory::PeakMemory;
  PeakMemory::reset();  // installs the tracker before anything of the setup exists
  const auto before = PeakMemory::current();
  Setup<Memory, Optimizer, ftopt::precision::Bf16Mixed> setup(ftopt::bench::vit_d256, std::move(memory), batch);
  setup.step();
  setup.step();  // the optimizer's state exists
  PeakMemory::reset();
  const auto live = PeakMemory::current() - before;
  setup.step();
  return static_cast<double>(live + PeakMemory::peak()) / (1 << 20);
}

/// Full fine-tuning of the d-256 ViT (batch 64) under Bf16Mixed: AdamW against AdamW8bit, and
/// AdamW8bit stepped inside the backward (memory::OptimizerInBackward).
void BM_AdamW8bitViT256(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  using Bf16 = ftopt::precision::Bf16Mixed;
  using InBackward = ftopt::memory::OptimizerInBackward<>;
  using InBackwardCheckpoint = ftopt::memory::OptimizerInBackward<ftopt::memory::Checkpoint>;
  using ftopt::optim::AdamW8bit;
  state.counters["adamw_whole_peak_MiB"] = whole_step_peak_mib<ftopt::memory::None, torch::optim::AdamW>({});
  state.counters["adamw8bit_whole_peak_MiB"] = whole_step_peak_mib<ftopt::memory::None, AdamW8bit>({});
  state.counters["adamw8bit_in_backward_whole_peak_MiB"] = whole_step_peak_mib<InBackward, AdamW8bit>({});
  state.counters["adamw_checkpoint_whole_peak_MiB"] =
      whole_step_peak_mib<ftopt::memory::Checkpoint, torch::optim::AdamW>({.every = 1});
  state.counters["adamw8bit_in_backward_checkpoint_whole_peak_MiB"] =
      whole_step_peak_mib<InBackwardCheckpoint, AdamW8bit>(InBackwardCheckpoint({.every = 1}));
  state.counters["in_backward_peak_ratio"] =
      state.counters["adamw8bit_in_backward_whole_peak_MiB"] / state.counters["adamw_whole_peak_MiB"];
  Setup<ftopt::memory::None, torch::optim::AdamW, Bf16> adamw(ftopt::bench::vit_d256, {}, 64);
  Setup<ftopt::memory::None, AdamW8bit, Bf16> eight(ftopt::bench::vit_d256, {}, 64);
  Setup<InBackward, AdamW8bit, Bf16> in_backward(ftopt::bench::vit_d256, {}, 64);
  std::vector<ftopt::bench::Contender> contenders = {{"adamw", [&] { adamw.step(); }},
                                                     {"adamw8bit", [&] { eight.step(); }},
                                                     {"adamw8bit_in_backward", [&] { in_backward.step(); }}};
  ftopt::bench::side_by_side(state, contenders, 2);
  ftopt::bench::record_peaks(state, contenders);
  state.counters["adamw_state_MiB"] = adamw_state_mib(adamw.optimizer);
  state.counters["adamw8bit_state_MiB"] = static_cast<double>(eight.optimizer.state_bytes()) / (1 << 20);
  state.counters["state_ratio"] = state.counters["adamw8bit_state_MiB"] / state.counters["adamw_state_MiB"];
  // The optimizer step alone (on one backward's gradients, kept): medians of 5, in rotation.
  std::vector<std::vector<double>> seconds(2);
  for (auto* model : {&adamw.model, &eight.model})
    torch::nn::functional::cross_entropy((*model)->forward(adamw.batch.first), adamw.batch.second).backward();
  for (int i = 0; i < 5; ++i) {
    seconds[i % 2].push_back(ftopt::bench::seconds_of([&] { (i % 2 ? eight.optimizer.step() : adamw.optimizer.step()); }));
    seconds[1 - i % 2].push_back(ftopt::bench::seconds_of([&] { (i % 2 ? adamw.optimizer.step() : eight.optimizer.step()); }));
  }
  state.counters["adamw_optimizer_step_us"] = ftopt::bench::median(seconds[0]) * 1e6;
  state.counters["adamw8bit_optimizer_step_us"] = ftopt::bench::median(seconds[1]) * 1e6;
}

/// The same whole peaks over the batch size (the argument): where the weights, gradients and
/// optimizer state outweigh the activations, AdamW8bit stepped in the backward halves the peak;
/// where the activations dominate, only checkpointing moves it.
void BM_InBackwardPeakByBatch(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  const std::int64_t batch = state.range(0);
  using InBackward = ftopt::memory::OptimizerInBackward<>;
  for (auto _ : state) {
    const double adamw = whole_step_peak_mib<ftopt::memory::None, torch::optim::AdamW>({}, batch);
    const double in_backward = whole_step_peak_mib<InBackward, ftopt::optim::AdamW8bit>({}, batch);
    state.counters["adamw_whole_peak_MiB"] = adamw;
    state.counters["adamw8bit_in_backward_whole_peak_MiB"] = in_backward;
    state.counters["in_backward_peak_ratio"] = in_backward / adamw;
  }
}

} // namespace

/// The LM head and loss of a causal LM at SmolLM2's width and vocabulary (hidden 576, vocab
/// 49,152), 8 x 256 tokens, under bf16 autocast, the head frozen (tied embeddings under LoRA):
/// forward and backward of the logits made whole then loss::causal_lm (transformers'
/// ForCausalLMLoss), against loss::fused_causal_lm (linear_cross_entropy, 64 rows a chunk, its
/// default, and 256). Counters: <name>_us, <name>_ratio (its time over the whole logits'),
/// <name>_peak_MiB (the step's peak above what was live: the hidden states and the head are),
/// peak_share (fused's over whole's).
void BM_FusedLinearCrossEntropy(benchmark::State& state) {
  at::set_num_threads(ftopt::hardware::available_cpus());
  torch::manual_seed(0);
  const auto head = torch::randn({49152, 576}) * 0.02;
  const auto hidden = torch::randn({8, 256, 576}).requires_grad_(true);
  const auto labels = torch::randint(0, 49152, {8, 256});
  const auto fused = ftopt::loss::fused_causal_lm([&] { return head; });
  const auto fused_256 = ftopt::loss::fused_causal_lm([&] { return head; }, 256);
  auto under_bf16 = [&](auto&& loss) { return ftopt::bench::bf16_loss_step(hidden, loss); };
  std::vector<ftopt::bench::Contender> contenders = {
      {"whole", under_bf16([&] { return ftopt::loss::causal_lm(at::linear(hidden, head), labels); })},
      {"fused", under_bf16([&] { return fused(hidden, labels); })},
      {"fused_256", under_bf16([&] { return fused_256(hidden, labels); })}};
  ftopt::bench::side_by_side(state, contenders, 2);
  ftopt::bench::record_peaks(state, contenders);
  state.counters["peak_share"] = state.counters["fused_peak_MiB"] / state.counters["whole_peak_MiB"];
}

BENCHMARK(BM_InBackwardPeakByBatch)->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Arg(64)
    ->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_AdamW8bitViT256)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_CheckpointViT12)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_ChunkedAttention785)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_FusedLinearCrossEntropy)->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_LargestBatchUnder256MiB)->Unit(benchmark::kSecond)->Iterations(1);
FTOPT_BENCHMARK_MAIN();
