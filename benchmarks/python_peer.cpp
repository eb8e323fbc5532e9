// ftopt against Python doing the same work on the same machine, side by side in one run: each
// iteration runs one step of every contender, in a rotating order, so machine noise falls on all
// of them alike. Both sides use the same thread count, take turns (a waiting Python blocks on a
// read), and time their own step; Python (python_peer.py) reports its time over a pipe.
//
//   FTOPT_BENCH_THREADS=2 build/benchmarks/bench_python_peer
//       --benchmark_out=python_peer.json --benchmark_out_format=json     (scripts/bench.sh runs it)
//   ./scripts/bench.sh text_peer        (bench_text_peer: the all-MiniLM-L6-v2 cases)
//   ./scripts/bench.sh llm_peer         (bench_llm_peer: SmolLM2-135M's LoRA step and generation)
//   ./scripts/bench.sh llm_families     (bench_llm_families: Gemma 3 270M's and Qwen2.5-0.5B's
//                                        LoRA steps, and the loss over Gemma's 262,144-token head)
//
// Cases: the d-256 ViT (6 blocks, 4 heads, MLP 1024, 4x4 patches of 28x28 images = 50 tokens,
// batch 128, AdamW) in fp32, under bf16 autocast, and under bf16 with LoRA r 8 on query and
// value, with DoRA there, and with VeRA r 256 there; the 784-64-10 MLP, batch 32, fp32; ViT
// inference; all-MiniLM-L6-v2's BERT (batch 32 x 128 tokens) with the PEFT recipe's LoRA under
// bf16 and in full in fp32. Contenders for a training case:
//   ftopt_adamw, ftopt_fused     ftopt's Trainer with torch::optim::AdamW (one kernel per tensor)
//                                and with optim::FusedAdamW (ATen's fused kernel) on twin models;
//   py_<attention>_<optimizer>_<mode>
//                                transformers + PEFT, attention sdpa (transformers' default) or
//                                eager (written out), AdamW foreach (torch's default) or
//                                fused=True, eager or torch.compile in the default and
//                                max-autotune-no-cudagraphs modes (compiled with whichever
//                                attention runs faster eagerly, named in the label).
// Counters: each contender's median step (<name>_ms); strongest_ms, Python's fastest step with
// fused AdamW, and strongest_x = strongest_ms / ftopt_fused_ms (above 1: ftopt is faster);
// adamw_x, Python's fastest with plain AdamW over ftopt_adamw_ms; most_x, what most users write
// (sdpa, plain AdamW, eager) over ftopt_fused_ms; compile seconds and dynamo's graph-break and
// graph counts per compiled contender. In the bf16 cases a further turn times a 1024^3 bf16 GEMM
// (gemm_gflops, the machine's bf16 GEMM rate), and ceiling_pct is the step's GEMM FLOPs (counted
// from the shapes) over ftopt's fused step time, as a share of that rate. The LLM step's memory,
// each side in a fresh process, the same quantity on both: the peak resident set minus the
// resident set after the model and optimizer are made and before the first step (ftopt_rss_MiB;
// py_rss_MiB with transformers' loss over the logits, py_chunked_rss_MiB with the chunked loss),
// and ftopt's tracked tensor bytes at the step's peak (ftopt_tensor_peak_MiB), another quantity.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/loss/causal_lm.hpp>
#include <ftopt/models/generate.hpp>
#include <ftopt/models/gemma3/family.hpp>
#include <ftopt/models/llama.hpp>

#include "machine.hpp"
#include "python_process.hpp"
#include "models.hpp"
#include "side_by_side.hpp"

// One source, two executables (bench_python_peer, bench_text_peer): each registers some of the
// cases below, so the others are unused in it.
#pragma GCC diagnostic ignored "-Wunused-function"

namespace {

using ftopt::bench::bench_threads;

/// The pause before each turn: longer than the OpenMP threads of the process that ran last spin.
constexpr std::chrono::milliseconds kPause(60);

/// The median of `n` calls of `step` run back to back (seconds): a turn of a case whose step is
/// short, so that waking the turn's threads after the pause is not part of its time.
template <class Step>
double median_of(int n, Step& step) {
  std::vector<double> seconds;
  for (int i = 0; i < n; ++i) seconds.push_back(ftopt::bench::seconds_of(step));
  return ftopt::bench::median(seconds);
}

/// How one Python contender runs: attention sdpa | eager | fastest | -, optimizer adamw | fused
/// | -, mode eager | default | max-autotune-no-cudagraphs; loss "" (the model's own, over the
/// logits) or chunked (the LLM's loss over the hidden states in chunks: python_peer.py).
struct PythonWay {
  std::string attention, optimizer, mode, loss;
  std::string name() const {
    auto part = [](std::string s) {
      std::replace(s.begin(), s.end(), '-', '_');
      return s == "_" || s.empty() ? std::string() : s + "_";
    };
    std::string n = "py_" + part(attention) + part(optimizer) + part(mode) + part(loss);
    n.pop_back();
    return n;
  }
};

/// One python_peer.py process set up for a case and a way.
class PythonPeer {
public:
  PythonPeer(const std::string& case_name, const PythonWay& way, int threads)
      : way_(way), process_(std::make_unique<ftopt::bench::PythonProcess>(FTOPT_PYTHON_EXE, FTOPT_PEER_SCRIPT)) {
    const auto ready = process_->ask("setup " + case_name + " " + way.attention + " " + way.optimizer + " " + way.mode +
                                    " " + std::to_string(threads) + (way.loss.empty() ? "" : " " + way.loss));
    char attention[32] = "";
    if (std::sscanf(ready.c_str(), "ready %lf %31s %d %d", &setup_seconds_, attention, &graph_breaks_, &graphs_) != 4)
      throw std::runtime_error("python peer (" + case_name + ", " + way.name() + ") did not set up: '" + ready +
                               "' (its error is above; FTOPT_PYTHON=" + process_->python() + ")");
    attention_ = attention;
  }

  /// The median of `n` steps run back to back, as timed by Python (seconds).
  double steps(int n) { return std::stod(process_->ask("steps " + std::to_string(n))); }
  /// MiB the process's resident set grew by, at its highest (VmHWM), from after the model and
  /// optimizer were made and before the first step.
  double peak_mib() { return std::stod(process_->ask("memory")); }
  /// Ends the process (what it measured stays readable here).
  void quit() { process_.reset(); }

  const PythonWay& way() const { return way_; }
  double setup_seconds() const { return setup_seconds_; }
  const std::string& attention() const { return attention_; }  ///< the one used (fastest: the one chosen)
  int graph_breaks() const { return graph_breaks_; }
  int graphs() const { return graphs_; }

private:
  PythonWay way_;
  std::unique_ptr<ftopt::bench::PythonProcess> process_;
  double setup_seconds_ = 0;
  std::string attention_;
  int graph_breaks_ = 0, graphs_ = 0;
};

/// The ways a Python user runs a training step: transformers' defaults with plain AdamW (what most
/// users write, first), attention written out, fused AdamW, and torch.compile in its two CPU
/// modes. A model without attention runs the same ways less the attention choice. A causal LM
/// (`chunked_loss`) also runs the careful Python user's loss, chunked over the hidden states, with
/// fused AdamW: eager with either attention, and compiled.
std::vector<PythonWay> training_ways(bool has_attention, bool chunked_loss = false) {
  if (!has_attention)
    return {{"-", "adamw", "eager"}, {"-", "fused", "eager"}, {"-", "fused", "default"},
            {"-", "fused", "max-autotune-no-cudagraphs"}};
  std::vector<PythonWay> ways = {{"sdpa", "adamw", "eager"},      {"eager", "adamw", "eager"},
                                 {"sdpa", "fused", "eager"},      {"eager", "fused", "eager"},
                                 {"fastest", "fused", "default"}, {"fastest", "fused", "max-autotune-no-cudagraphs"}};
  if (chunked_loss)
    ways.insert(ways.end(), {{"sdpa", "fused", "eager", "chunked"},
                             {"eager", "fused", "eager", "chunked"},
                             {"fastest", "fused", "default", "chunked"}});
  return ways;
}

/// One 1024^3 bf16 GEMM's rate (GFLOP/s): the best of five, after one warm-up.
double bf16_gemm_gflops() {
  static const auto a = torch::randn({1024, 1024}).to(torch::kBFloat16), b = torch::randn({1024, 1024}).to(torch::kBFloat16);
  at::mm(a, b);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    at::mm(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * 1024 * 1024 * 1024 / best / 1e9;
}

/// Times ftopt's two steps (AdamW, FusedAdamW) against the case in every Python way, side by side.
/// step_gemm_flop > 0 adds the bf16 GEMM rate as a further turn. With `rounds` > 0, for a model
/// too large for every Python process at once, one Python process lives at a time: each way's
/// steps are timed in rotation with ftopt's two for `rounds` rounds, ftopt's medians over all of
/// them; and the processes of sdpa attention, fused AdamW, eager report their memory (py_rss_MiB
/// with the model's own loss, py_chunked_rss_MiB with the chunked one). `chunked_loss`: the
/// Python ways include the chunked loss (a causal LM).
template <class Step, class FusedStep>
void compare(benchmark::State& state, const std::string& case_name, bool has_attention, int burst, Step ftopt_step,
             FusedStep fused_step, double step_gemm_flop = 0, int rounds = 0, bool chunked_loss = false) {
  const int threads = bench_threads();
  at::set_num_threads(threads);
  const auto ways = training_ways(has_attention, chunked_loss);
  std::vector<std::unique_ptr<PythonPeer>> peers;
  if (rounds == 0)
    for (const auto& way : ways) peers.push_back(std::make_unique<PythonPeer>(case_name, way, threads));
  for (int i = 0; i < 3; ++i) {
    ftopt_step();
    fused_step();
  }
  std::vector<std::function<double()>> turns = {[&] { return median_of(burst, ftopt_step); },
                                                [&] { return median_of(burst, fused_step); }};
  std::vector<double> ftopt_s, fused_s, python_ms;
  auto python_turn = [burst](PythonPeer* p) { return [p, burst] { return p->steps(burst); }; };
  if (rounds == 0) {
    for (auto& peer : peers) turns.push_back(python_turn(peer.get()));
    if (step_gemm_flop > 0) turns.push_back(bf16_gemm_gflops);  // a rate, not seconds: its own median
    const auto measured = ftopt::bench::in_rotation(state, turns, kPause);
    ftopt_s = measured[0], fused_s = measured[1];
    for (std::size_t i = 0; i < peers.size(); ++i) python_ms.push_back(ftopt::bench::median(measured[2 + i]) * 1e3);
    if (step_gemm_flop > 0) {
      const double gflops = ftopt::bench::median(measured.back());
      state.counters["gemm_gflops"] = gflops;
      state.counters["ceiling_pct"] = 100 * step_gemm_flop / ftopt::bench::median(fused_s) / (gflops * 1e9);
    }
  } else {
    for (auto _ : state) {}  // the rounds below are the measurement
    for (const auto& way : ways) {
      auto peer = std::make_unique<PythonPeer>(case_name, way, threads);
      auto group = turns;
      group.push_back(python_turn(peer.get()));
      const auto measured = ftopt::bench::in_rotation(group, rounds, kPause);
      ftopt_s.insert(ftopt_s.end(), measured[0].begin(), measured[0].end());
      fused_s.insert(fused_s.end(), measured[1].begin(), measured[1].end());
      python_ms.push_back(ftopt::bench::median(measured[2]) * 1e3);
      if (way.attention == "sdpa" && way.optimizer == "fused" && way.mode == "eager")
        state.counters[way.loss.empty() ? "py_rss_MiB" : "py_" + way.loss + "_rss_MiB"] = peer->peak_mib();
      peers.push_back(std::move(peer));
      peers.back()->quit();  // its memory goes back before the next way's process starts
    }
  }
  using ftopt::bench::median;
  const double ftopt_ms = median(ftopt_s) * 1e3, fused_ms = median(fused_s) * 1e3;
  state.counters["ftopt_adamw_ms"] = ftopt_ms;
  state.counters["ftopt_fused_ms"] = fused_ms;
  double strongest = std::numeric_limits<double>::infinity(), plain = strongest;
  std::string strongest_name, label;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const auto& peer = *peers[i];
    const double ms = python_ms[i];
    const auto name = peer.way().name();
    state.counters[name + "_ms"] = ms;
    if (peer.way().mode != "eager") {
      state.counters[name + "_compile_s"] = peer.setup_seconds();
      state.counters[name + "_graph_breaks"] = peer.graph_breaks();
      state.counters[name + "_graphs"] = peer.graphs();
      label += name + " attention=" + peer.attention() + " ";
    }
    if (peer.way().optimizer == "fused" && ms < strongest) strongest = ms, strongest_name = name;
    if (peer.way().optimizer == "adamw" && ms < plain) plain = ms;
  }
  const double most = python_ms[0];  // training_ways' first: what most users write
  state.counters["strongest_ms"] = strongest;
  state.counters["strongest_x"] = strongest / fused_ms;
  state.counters["adamw_x"] = plain / ftopt_ms;
  state.counters["most_x"] = most / fused_ms;
  state.counters["threads"] = threads;
  state.SetLabel("strongest=" + strongest_name + " " + label);
}

ftopt::models::ViT vit() { return ftopt::models::ViT(ftopt::bench::vit_d256); }

/// The GEMM FLOPs of one training step of that ViT, counted from its shapes: every block's
/// Linears (2 N in out each, N = batch x tokens) and attention's two batched products (4 B T^2 d),
/// the patch convolution and the classifier, forward; the backward's input gradients as much
/// again (the convolution's input is the image: none); and weight gradients for what trains:
/// everything when full, else only the classifier (LoRA's rank-8 products, under 1% of the
/// total, are left out) and the `full_width` Linears per block whose adapter's gradients come from
/// one full-width product each (DoRA's; VeRA's, its rank wide for the layer).
double vit_gemm_flop(bool full, int full_width = 0) {
  const auto& o = ftopt::bench::vit_d256;
  const double B = 128, T = static_cast<double>(o.patches() + 1), N = B * T, h = static_cast<double>(o.hidden),
               m = static_cast<double>(o.intermediate), L = static_cast<double>(o.layers);
  const double linears = L * 2 * N * (4 * h * h + 2 * h * m), attention = L * 4 * B * T * T * h;
  const double patch = 2 * B * static_cast<double>(o.patches()) * o.patch_size * o.patch_size * o.channels * h;
  const double head = 2 * B * h * static_cast<double>(o.num_labels);
  const double forward = linears + attention + patch + head;
  return forward + (linears + attention + head) + (full ? linears + patch + head : head + L * full_width * 2 * N * h * h);
}

/// One ftopt training setup: a model from `make`, its Trainer (its loss from `loss_of(model)`:
/// cross-entropy unless given) and an optimizer of type Optimizer.
template <class Trainer, class Model, class Optimizer>
struct Setup {
  template <class Make, class Peft>
  Setup(Make make, Peft peft, const std::function<ftopt::LossFunction(Model&)>& loss_of = {})
      : model(make()),
        trainer({.device = torch::kCPU, .loss = loss_of ? loss_of(model) : ftopt::LossFunction(ftopt::cross_entropy),
                 .report_hardware = false},
                {}, std::move(peft)),
        optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-4)) {}
  template <class Batch>
  void step(const Batch& batch) { trainer.train_step(model, optimizer, batch); }
  Model model;
  Trainer trainer;
  Optimizer optimizer;
};

/// The case on twin models, one with AdamW and one with FusedAdamW, against Python.
template <class Trainer, class Model, class Make, class Peft, class Batch>
void run_case(benchmark::State& state, const std::string& name, Make make, Peft peft, const Batch& batch,
              bool has_attention, int burst, double step_gemm_flop = 0) {
  torch::manual_seed(0);
  Setup<Trainer, Model, torch::optim::AdamW> plain(make, peft);
  torch::manual_seed(0);
  Setup<Trainer, Model, ftopt::optim::FusedAdamW> fused(make, peft);
  compare(state, name, has_attention, burst, [&] { plain.step(batch); }, [&] { fused.step(batch); }, step_gemm_flop);
}

template <class Precision, class Peft = ftopt::peft::Full>
void vit_case(benchmark::State& state, const std::string& name, Peft peft = {}, int full_width_linears = 0) {
  const std::pair batch{torch::randn({128, 1, 28, 28}), torch::randint(0, 10, {128})};
  const bool bf16 = std::is_same_v<Precision, ftopt::precision::Bf16Mixed>;
  const double flop = bf16 ? vit_gemm_flop(std::is_same_v<Peft, ftopt::peft::Full>, full_width_linears) : 0;
  run_case<ftopt::Trainer<Precision, Peft>, ftopt::models::ViT>(state, name, vit, std::move(peft), batch, true, 1, flop);
}

void vit_fp32_full(benchmark::State& state) { vit_case<ftopt::precision::Fp32>(state, "vit_fp32_full"); }
void vit_bf16_full(benchmark::State& state) { vit_case<ftopt::precision::Bf16Mixed>(state, "vit_bf16_full"); }
void vit_bf16_lora(benchmark::State& state) {
  vit_case<ftopt::precision::Bf16Mixed>(
      state, "vit_bf16_lora", ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "value"}}));
}
void vit_bf16_dora(benchmark::State& state) {
  vit_case<ftopt::precision::Bf16Mixed>(
      state, "vit_bf16_dora", ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "value"}, .dora = true}),
      /*full_width_linears=*/2);
}
/// VeRA r 256 on query and value (PEFT's VeraConfig defaults otherwise): its rank is wide for the
/// 256-wide layers, so its gradients come from one full-width product per layer, as DoRA's.
void vit_bf16_vera(benchmark::State& state) {
  vit_case<ftopt::precision::Bf16Mixed>(state, "vit_bf16_vera", ftopt::peft::Vera({.r = 256, .targets = {"query", "value"}}),
                                        /*full_width_linears=*/2);
}
/// all-MiniLM-L6-v2's BERT (benchmarks/models.hpp: minilm), batch 32 x 128 tokens, dropout 0.1 as
/// its config: the PEFT recipe's LoRA in bf16 (the main job's best row), and full fine-tuning in
/// fp32 (its baseline).
template <class Precision, class Peft = ftopt::peft::Full>
void bert_case(benchmark::State& state, const std::string& name, Peft peft = {}) {
  const auto batch = ftopt::bench::minilm_batch();
  auto make = [] { return ftopt::models::Bert(ftopt::bench::minilm); };
  run_case<ftopt::Trainer<Precision, Peft>, ftopt::models::Bert>(state, name, make, std::move(peft), batch, true, 1);
}
void bert_bf16_lora(benchmark::State& state) {
  bert_case<ftopt::precision::Bf16Mixed>(state, "bert_bf16_lora",
                                         ftopt::peft::Lora({.r = 8, .alpha = 16, .dropout = 0.1,
                                                            .targets = {"query", "value"},
                                                            .modules_to_save = {"classifier"}}));
}
void bert_fp32_full(benchmark::State& state) { bert_case<ftopt::precision::Fp32>(state, "bert_fp32_full"); }

/// The decoders of the LoRA step: SmolLM2-135M's architecture (models::LlamaOptions' defaults),
/// Gemma 3 270M's and Qwen2.5-0.5B's (their config.json fields, as python_peer.py's
/// decoder_config), random weights.
ftopt::models::LlamaOptions decoder_options(const std::string& name) {
  ftopt::models::LlamaOptions o;
  if (name == "gemma3") {
    o = {.vocab_size = 262144, .hidden = 640, .intermediate = 2048, .layers = 18, .heads = 4, .kv_heads = 1,
         .head_dim = 256, .max_position_embeddings = 32768, .rms_norm_eps = 1e-6, .rope_theta = 1e6};
    ftopt::models::families::Gemma3::set_parts(o);
    o.sliding_window = 512;
    ftopt::models::families::Gemma3::every_sixth_global(o);
    o.rope_local_theta = 1e4;
    o.query_pre_attn_scalar = 256;
  } else if (name == "qwen2") {
    o = {.vocab_size = 151936, .hidden = 896, .intermediate = 4864, .layers = 24, .heads = 14, .kv_heads = 2,
         .max_position_embeddings = 32768, .rms_norm_eps = 1e-6, .rope_theta = 1e6, .qkv_bias = true};
  } else if (name != "llama") {
    throw std::runtime_error("no decoder named " + name + " (llama, gemma3, qwen2)");
  }
  return o;
}

/// A decoder of decoder_options(`name`), batch 8 x 256 random tokens, the labels the ids; LoRA
/// r 16 on all seven projections (PEFT's recipe, dropout 0.05) under bf16 autocast. ftopt trains
/// it as the main job's LLM task does, with the fused linear cross-entropy over the hidden states
/// (loss::fused_causal_lm); ftopt_adamw with torch's AdamW, ftopt_fused with optim::FusedAdamW.
/// Python: transformers + PEFT, its loss over the logits, and the chunked loss over the hidden
/// states (python_peer.py's ChunkedCausalLm).
struct LlamaCase {
  using Trainer = ftopt::Trainer<ftopt::precision::Bf16Mixed, ftopt::peft::Lora>;
  template <class Optimizer>
  using Setup = ::Setup<Trainer, ftopt::models::Llama, Optimizer>;

  explicit LlamaCase(std::string decoder = "llama") : options(decoder_options(decoder)) {}
  ftopt::models::LlamaOptions options;
  torch::Tensor ids = torch::randint(100, 49000, {8, 256}, torch::kLong);
  std::pair<torch::Tensor, torch::Tensor> batch{ids, ids};
  ftopt::peft::Lora lora{{.r = 16, .alpha = 32, .dropout = 0.05,
                          .targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}};
  static ftopt::LossFunction loss(ftopt::models::Llama& model) {
    return ftopt::loss::fused_causal_lm([m = model.ptr()] { return m->head_weight(); });
  }
  template <class Optimizer>
  std::unique_ptr<Setup<Optimizer>> setup() {
    torch::manual_seed(0);
    auto make = [o = options] {
      ftopt::models::Llama model(o);
      model->output_hidden = true;
      return model;
    };
    return std::make_unique<Setup<Optimizer>>(make, lora, loss);
  }
};

/// A line of /proc/self/status in KiB ("VmRSS", "VmHWM").
double status_kib(const std::string& key) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with(key + ":")) return std::stod(line.substr(key.size() + 1));
  throw std::runtime_error("no " + key + " in /proc/self/status");
}

/// The LLM step's memory, measured in this fresh process as python_peer.py measures Python's:
/// the resident set after the model, Trainer and optimizer are made and before the first step,
/// then the peak resident set (VmHWM, its count restarted there) over three steps; the
/// difference, and the tensor bytes ftopt's tracking allocator saw live at the step's peak.
/// Prints "rss_MiB <x> tensor_peak_MiB <y>" (bench_llm_peer --llama-memory DECODER).
int llama_memory_child(const std::string& decoder) {
  at::set_num_threads(bench_threads());
  using ftopt::memory::PeakMemory;
  PeakMemory::reset();
  const auto before = PeakMemory::current();
  LlamaCase c(decoder);
  auto alone = c.setup<ftopt::optim::FusedAdamW>();
  const double resident = status_kib("VmRSS");
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM starts again from the resident set now
  alone->step(c.batch);
  alone->step(c.batch);  // the optimizer's state exists
  PeakMemory::reset();
  const auto live = PeakMemory::current() - before;
  alone->step(c.batch);
  std::printf("rss_MiB %.1f tensor_peak_MiB %.1f\n", (status_kib("VmHWM") - resident) / 1024,
              static_cast<double>(live + PeakMemory::peak()) / (1 << 20));
  return 0;
}

/// The LoRA step of decoder `decoder` ("llama": SmolLM2-135M's; "gemma3", "qwen2"), filed as
/// `case_name` (python_peer.py's case).
void decoder_bf16_lora(benchmark::State& state, const std::string& decoder, const std::string& case_name) {
  {  // the memory first, in a fresh process of this program
    // popen runs a shell, whose /proc/self/exe is the shell: this program's path is read first.
    const auto self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::FILE* child = popen(("'" + self + "' --llama-memory " + decoder).c_str(), "r");
    double rss = 0, tensors = 0;
    const bool read = child && std::fscanf(child, "rss_MiB %lf tensor_peak_MiB %lf", &rss, &tensors) == 2;
    if (child) pclose(child);
    if (!read) throw std::runtime_error("bench_llm_peer --llama-memory did not report (its error is above)");
    state.counters["ftopt_rss_MiB"] = rss;
    state.counters["ftopt_tensor_peak_MiB"] = tensors;
  }
  LlamaCase c(decoder);
  auto plain = c.setup<torch::optim::AdamW>();
  auto fused = c.setup<ftopt::optim::FusedAdamW>();
  compare(state, case_name, true, 1, [&] { plain->step(c.batch); }, [&] { fused->step(c.batch); }, 0,
          /*rounds=*/3, /*chunked_loss=*/true);
}
void llama_bf16_lora(benchmark::State& state) { decoder_bf16_lora(state, "llama", "llama_bf16_lora"); }

/// The loss and its gradients over Gemma 3's head (262,144 x 640, random) for 8 x 256 tokens under
/// bf16 autocast: the logits made whole then loss::causal_lm (transformers' ForCausalLMLoss),
/// against loss::fused_causal_lm, which never forms them. Counters: whole_us, fused_us,
/// <name>_peak_MiB (the step's peak above what was live: the hidden states and the head),
/// peak_share (fused's over whole's). bench_memory's BM_FusedLinearCrossEntropy is SmolLM2's.
void gemma3_fused_loss(benchmark::State& state) {
  at::set_num_threads(bench_threads());
  torch::manual_seed(0);
  const auto head = torch::randn({262144, 640}) * 0.02;
  const auto hidden = torch::randn({8, 256, 640}).requires_grad_(true);
  const auto labels = torch::randint(0, 262144, {8, 256});
  const auto fused = ftopt::loss::fused_causal_lm([&] { return head; });
  auto under_bf16 = [&](auto&& loss) { return ftopt::bench::bf16_loss_step(hidden, loss); };
  std::vector<ftopt::bench::Contender> contenders = {
      {"whole", under_bf16([&] { return ftopt::loss::causal_lm(at::linear(hidden, head), labels); })},
      {"fused", under_bf16([&] { return fused(hidden, labels); })}};
  ftopt::bench::side_by_side(state, contenders, 1);
  ftopt::bench::record_peaks(state, contenders);
  state.counters["peak_share"] = state.counters["fused_peak_MiB"] / state.counters["whole_peak_MiB"];
}
void gemma3_bf16_lora(benchmark::State& state) { decoder_bf16_lora(state, "gemma3", "gemma3_bf16_lora"); }
void qwen2_bf16_lora(benchmark::State& state) { decoder_bf16_lora(state, "qwen2", "qwen2_bf16_lora"); }

/// Greedy decoding with SmolLM2-135M's architecture (random weights: a step's time does not
/// depend on them), float32, batch 1: a prompt of 128 tokens, then 64 new ones (no stop token, so
/// both sides make all 64). ftopt's models::generate (KV cache) against transformers'
/// generate(do_sample=False) with its dynamic cache, sdpa and eager attention. Counters:
/// ftopt_ms, py_<attention>_ms, python_ms (the faster), ftopt_tokens_per_s,
/// python_tokens_per_s, generate_x = python_ms / ftopt_ms.
void llama_generate(benchmark::State& state) {
  const int threads = bench_threads();
  at::set_num_threads(threads);
  torch::manual_seed(0);
  ftopt::models::Llama model(ftopt::models::LlamaOptions{});
  model->eval();
  const auto ids = torch::randint(100, 49000, {128}, torch::kLong);
  const std::vector<std::int64_t> prompt(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
  constexpr std::int64_t new_tokens = 64;
  std::vector<std::unique_ptr<PythonPeer>> peers;
  for (const char* attention : {"sdpa", "eager"})
    peers.push_back(std::make_unique<PythonPeer>("llama_generate", PythonWay{attention, "-", "eager"}, threads));
  std::vector<std::function<double()>> turns = {[&] {
    return ftopt::bench::seconds_of([&] {
      const auto answer = ftopt::models::generate(*model, prompt, {.max_new_tokens = new_tokens});
      if (static_cast<std::int64_t>(answer.size()) != new_tokens) throw std::runtime_error("generate stopped early");
    });
  }};
  for (auto& peer : peers) turns.push_back([p = peer.get()] { return p->steps(1); });
  for (const auto& t : turns) t();
  const auto seconds = ftopt::bench::in_rotation(state, turns, kPause);
  using ftopt::bench::median;
  const double ftopt_ms = median(seconds[0]) * 1e3;
  double python_ms = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const double ms = median(seconds[1 + i]) * 1e3;
    state.counters["py_" + peers[i]->way().attention + "_ms"] = ms;
    python_ms = std::min(python_ms, ms);
  }
  state.counters["ftopt_ms"] = ftopt_ms;
  state.counters["python_ms"] = python_ms;
  state.counters["ftopt_tokens_per_s"] = new_tokens / (ftopt_ms / 1e3);
  state.counters["python_tokens_per_s"] = new_tokens / (python_ms / 1e3);
  state.counters["generate_x"] = python_ms / ftopt_ms;
  state.counters["threads"] = threads;
}
void mlp_fp32_full(benchmark::State& state) {
  const std::pair batch{torch::randn({32, 784}), torch::randint(0, 10, {32})};
  auto make = [] { return ftopt::models::Mlp({.in = 784, .hidden = {64}, .out = 10}); };
  run_case<ftopt::Trainer<>, ftopt::models::Mlp>(state, "mlp_fp32_full", make, ftopt::peft::Full{}, batch, false, 20);
}

/// Inference of the same ViT (eval, no gradients, batch 256): ftopt in fp32, with
/// quant::DynamicInt8 (per-tensor weights, as torch.ao's default) and with bf16 weights
/// (converted once), against Python's fp32 (sdpa or eager attention, eager or compiled) and
/// torch.ao's dynamic int8 (sdpa or eager attention), side by side. Counters: each contender's
/// median (<name>_ms); python_fp32_ms and python_int8_ms, Python's fastest of each;
/// int8_x = python_int8_ms / ftopt_int8_ms, fp32_x = python_fp32_ms / ftopt_fp32_ms.
void vit_inference(benchmark::State& state) {
  const int threads = bench_threads();
  at::set_num_threads(threads);
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  auto fp32 = vit(), int8 = vit(), bf16 = vit();
  for (auto* m : {&fp32, &int8, &bf16}) (*m)->eval();
  ftopt::quant::DynamicInt8({.granularity = ftopt::quant::Granularity::PerTensor}).convert(*int8);
  bf16->to(torch::kBFloat16);
  const auto x = torch::randn({256, 1, 28, 28});
  const auto x_bf16 = x.to(torch::kBFloat16);
  struct Peer {
    std::string case_name;
    PythonWay way;
  };
  const std::vector<Peer> ways = {{"vit_infer_fp32", {"sdpa", "-", "eager"}},
                                  {"vit_infer_fp32", {"eager", "-", "eager"}},
                                  {"vit_infer_fp32", {"fastest", "-", "default"}},
                                  {"vit_infer_int8", {"sdpa", "-", "eager"}},
                                  {"vit_infer_int8", {"eager", "-", "eager"}}};
  std::vector<std::unique_ptr<PythonPeer>> peers;
  for (const auto& p : ways) peers.push_back(std::make_unique<PythonPeer>(p.case_name, p.way, threads));
  using ftopt::bench::seconds_of;
  std::vector<std::function<double()>> turns = {[&] { return seconds_of([&] { fp32->forward(x); }); },
                                                [&] { return seconds_of([&] { int8->forward(x); }); },
                                                [&] { return seconds_of([&] { bf16->forward(x_bf16); }); }};
  for (auto& peer : peers) turns.push_back([p = peer.get()] { return p->steps(1); });
  for (int i = 0; i < 2; ++i)
    for (const auto& t : turns) t();
  const auto seconds = ftopt::bench::in_rotation(state, turns, kPause);
  using ftopt::bench::median;
  const double ftopt_fp32 = median(seconds[0]) * 1e3, ftopt_int8 = median(seconds[1]) * 1e3;
  state.counters["ftopt_fp32_ms"] = ftopt_fp32;
  state.counters["ftopt_int8_ms"] = ftopt_int8;
  state.counters["ftopt_bf16_ms"] = median(seconds[2]) * 1e3;
  double python_fp32 = std::numeric_limits<double>::infinity(), python_int8 = python_fp32;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const double ms = median(seconds[3 + i]) * 1e3;
    const bool is_int8 = ways[i].case_name == "vit_infer_int8";
    state.counters[std::string(is_int8 ? "py_int8_" : "py_fp32_") + peers[i]->way().name().substr(3) + "_ms"] = ms;
    double& best = is_int8 ? python_int8 : python_fp32;
    best = std::min(best, ms);
  }
  state.counters["python_fp32_ms"] = python_fp32;
  state.counters["python_int8_ms"] = python_int8;
  state.counters["fp32_x"] = python_fp32 / ftopt_fp32;
  state.counters["int8_x"] = python_int8 / ftopt_int8;
  state.counters["threads"] = threads;
}

} // namespace

// bench_python_peer: the ViT and MLP cases; bench_text_peer (the same source, FTOPT_TEXT_PEER):
// the text model's, filed apart (benchmarks/results/<machine>/text_peer.json).
#if FTOPT_LLM_PEER
BENCHMARK(llama_generate)->Unit(benchmark::kMillisecond)->Iterations(6)->UseRealTime();
BENCHMARK(llama_bf16_lora)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();
#elif FTOPT_LLM_FAMILIES
BENCHMARK(gemma3_fused_loss)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(gemma3_bf16_lora)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();
BENCHMARK(qwen2_bf16_lora)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();
#elif FTOPT_TEXT_PEER
BENCHMARK(bert_bf16_lora)->Unit(benchmark::kMillisecond)->Iterations(8)->UseRealTime();
BENCHMARK(bert_fp32_full)->Unit(benchmark::kMillisecond)->Iterations(4)->UseRealTime();
#else
BENCHMARK(vit_fp32_full)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(vit_bf16_full)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(vit_bf16_lora)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(vit_bf16_dora)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(vit_bf16_vera)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(mlp_fp32_full)->Unit(benchmark::kMillisecond)->Iterations(30)->UseRealTime();
BENCHMARK(vit_inference)->Unit(benchmark::kMillisecond)->Iterations(10)->UseRealTime();
#endif

/// The Python side's versions, for the results' context.
std::string python_versions() {
  const char* python = std::getenv("FTOPT_PYTHON");
  const std::string command = std::string(python ? python : FTOPT_PYTHON_EXE) + " " FTOPT_PEER_SCRIPT;
  std::FILE* pipe = popen(("echo versions | " + command + " 2>/dev/null").c_str(), "r");
  if (!pipe) return "unknown";
  char buffer[256] = "";
  const bool read = std::fgets(buffer, sizeof buffer, pipe) != nullptr;
  pclose(pipe);
  std::string text = read ? buffer : "unknown";
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

int main(int argc, char** argv) {
#if FTOPT_LLM_PEER || FTOPT_LLM_FAMILIES
  if (argc == 3 && std::string(argv[1]) == "--llama-memory") return llama_memory_child(argv[2]);
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ftopt::bench::add_machine_context();
  benchmark::AddCustomContext("python", python_versions());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
