// ftopt against Python doing the same work on the same machine, side by side in one run: each
// iteration runs one ftopt training step and one step of each Python process (python_peer.py:
// transformers' ViT and PEFT's LoRA, eager and under torch.compile), in a rotating order, so
// machine noise falls on all three alike. Both sides use the same thread count, take turns (a
// waiting Python blocks on a read), and time their own step; Python reports its time over a pipe.
//
//   FTOPT_BENCH_THREADS=2 build/benchmarks/bench_python_peer     (prints a table at the end)
//
// Cases, as issues 18 and 19 name them: the d-256 ViT (6 blocks, 4 heads, MLP 1024, 4x4 patches
// of 28x28 images = 50 tokens, batch 128, AdamW) in fp32, under bf16 autocast, and under bf16 with
// LoRA r 8 on query and value, and with DoRA there; the 784-64-10 MLP, batch 32, fp32. ftopt runs twice, on twin
// models: with torch::optim::AdamW (as Python's default AdamW, one kernel per tensor) and with
// optim::FusedAdamW (ATen's fused kernel, Python's AdamW(fused=True)). Counters: the median step
// of each (ms) and eager_x / compile_x, Python's time over ftopt's with AdamW (above 1: ftopt is
// faster), and fused_x, the same over ftopt with FusedAdamW. In the bf16 cases a fifth turn times
// a 1024^3 bf16 GEMM (the machine's bf16 GEMM ceiling, gemm_gflops), and ceiling_pct is the
// step's GEMM FLOPs (vit_gemm_flop: counted from the shapes) over ftopt's step time, as a share
// of that ceiling.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <ftopt.hpp>

#include "models.hpp"
#include "side_by_side.hpp"

namespace {

/// One python_peer.py process, driven a line at a time over two pipes.
class PythonPeer {
public:
  PythonPeer(const std::string& case_name, const std::string& mode, int threads) {
    const char* python = std::getenv("FTOPT_PYTHON");
    const std::string exe = python ? python : FTOPT_PYTHON_EXE;
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) throw std::runtime_error("python peer: pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("python peer: fork failed");
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      execl(exe.c_str(), exe.c_str(), FTOPT_PEER_SCRIPT, static_cast<char*>(nullptr));
      std::perror(("python peer: cannot run " + exe).c_str());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    const auto ready = ask("setup " + case_name + " " + mode + " " + std::to_string(threads));
    if (ready.rfind("ready", 0) != 0)
      throw std::runtime_error("python peer (" + case_name + ", " + mode + ") did not set up: '" + ready +
                               "' (its error is above; FTOPT_PYTHON=" + exe + ")");
  }
  ~PythonPeer() {
    std::fputs("quit\n", in_);
    std::fclose(in_);
    std::fclose(out_);
    waitpid(pid_, nullptr, 0);
  }
  PythonPeer(const PythonPeer&) = delete;
  PythonPeer& operator=(const PythonPeer&) = delete;

  /// One step, as timed by Python (seconds).
  double step() { return std::stod(ask("step")); }

private:
  std::string ask(const std::string& line) {
    std::fprintf(in_, "%s\n", line.c_str());
    std::fflush(in_);
    char buffer[256];
    if (!std::fgets(buffer, sizeof buffer, out_)) return "(no answer: the process ended)";
    std::string answer(buffer);
    while (!answer.empty() && (answer.back() == '\n' || answer.back() == '\r')) answer.pop_back();
    return answer;
  }

  pid_t pid_ = -1;
  std::FILE* in_ = nullptr;
  std::FILE* out_ = nullptr;
};

int bench_threads() {
  const char* text = std::getenv("FTOPT_BENCH_THREADS");
  return text ? std::atoi(text) : ftopt::hardware::available_cpus();
}

struct Row {
  std::string name;
  double ftopt_ms, fused_ms, eager_ms, compile_ms;
  double gemm_gflops = 0, ceiling_pct = 0;  ///< bf16 cases only
};

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
std::vector<Row>& rows() {
  static std::vector<Row> all;
  return all;
}

/// Times ftopt's two steps (AdamW, FusedAdamW) against the same case in Python, eager and compiled.
/// step_gemm_flop > 0 adds the bf16 GEMM ceiling as a fifth turn.
template <class Step, class FusedStep>
void compare(benchmark::State& state, const std::string& case_name, Step ftopt_step, FusedStep fused_step,
             double step_gemm_flop = 0) {
  const int threads = bench_threads();
  at::set_num_threads(threads);
  PythonPeer eager(case_name, "eager", threads), compiled(case_name, "compile", threads);
  for (int i = 0; i < 3; ++i) {
    ftopt_step();
    fused_step();
  }
  using ftopt::bench::seconds_of;
  std::vector<std::function<double()>> turns = {[&] { return seconds_of(ftopt_step); }, [&] { return eager.step(); },
                                                [&] { return seconds_of(fused_step); }, [&] { return compiled.step(); }};
  if (step_gemm_flop > 0) turns.push_back(bf16_gemm_gflops);  // a rate, not seconds: its own median
  const auto measured = ftopt::bench::in_rotation(state, turns);
  using ftopt::bench::median;
  Row row{case_name, median(measured[0]) * 1e3, median(measured[2]) * 1e3, median(measured[1]) * 1e3,
          median(measured[3]) * 1e3};
  if (step_gemm_flop > 0) {
    row.gemm_gflops = median(measured[4]);
    row.ceiling_pct = 100 * step_gemm_flop / (row.ftopt_ms / 1e3) / (row.gemm_gflops * 1e9);
    state.counters["gemm_gflops"] = row.gemm_gflops;
    state.counters["ceiling_pct"] = row.ceiling_pct;
    state.counters["step_gemm_gflop"] = step_gemm_flop / 1e9;
  }
  state.counters["ftopt_ms"] = row.ftopt_ms;
  state.counters["fused_ms"] = row.fused_ms;
  state.counters["fused_x"] = row.eager_ms / row.fused_ms;
  state.counters["eager_ms"] = row.eager_ms;
  state.counters["compile_ms"] = row.compile_ms;
  state.counters["eager_x"] = row.eager_ms / row.ftopt_ms;
  state.counters["compile_x"] = row.compile_ms / row.ftopt_ms;
  state.counters["threads"] = threads;
  rows().push_back(row);
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

/// One ftopt training setup: a model from `make`, its Trainer and an optimizer of type Optimizer.
template <class Trainer, class Model, class Optimizer>
struct Setup {
  template <class Make, class Peft>
  Setup(Make make, Peft peft)
      : model(make()), trainer({.device = torch::kCPU, .report_hardware = false}, {}, std::move(peft)),
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
              double step_gemm_flop = 0) {
  torch::manual_seed(0);
  Setup<Trainer, Model, torch::optim::AdamW> plain(make, peft);
  torch::manual_seed(0);
  Setup<Trainer, Model, ftopt::optim::FusedAdamW> fused(make, peft);
  compare(state, name, [&] { plain.step(batch); }, [&] { fused.step(batch); }, step_gemm_flop);
}

template <class Precision, class Peft = ftopt::peft::Full>
void vit_case(benchmark::State& state, const std::string& name, Peft peft = {}, int full_width_linears = 0) {
  const std::pair batch{torch::randn({128, 1, 28, 28}), torch::randint(0, 10, {128})};
  const bool bf16 = std::is_same_v<Precision, ftopt::precision::Bf16Mixed>;
  const double flop = bf16 ? vit_gemm_flop(std::is_same_v<Peft, ftopt::peft::Full>, full_width_linears) : 0;
  run_case<ftopt::Trainer<Precision, Peft>, ftopt::models::ViT>(state, name, vit, std::move(peft), batch, flop);
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
void mlp_fp32_full(benchmark::State& state) {
  const std::pair batch{torch::randn({32, 784}), torch::randint(0, 10, {32})};
  auto make = [] { return ftopt::models::Mlp({.in = 784, .hidden = {64}, .out = 10}); };
  run_case<ftopt::Trainer<>, ftopt::models::Mlp>(state, "mlp_fp32_full", make, ftopt::peft::Full{}, batch);
}

/// Inference of the same ViT (eval, no gradients, batch 256): ftopt in fp32, with
/// quant::DynamicInt8 (per-tensor weights, as torch.ao's default) and with bf16 weights
/// (converted once), against Python's fp32 and torch.ao dynamic int8, side by side.
struct InferenceRow {
  double ftopt_fp32, ftopt_int8, ftopt_bf16, python_fp32, python_int8;
};
std::vector<InferenceRow>& inference_rows() {
  static std::vector<InferenceRow> all;
  return all;
}

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
  PythonPeer py_fp32("vit_infer_fp32", "eager", threads), py_int8("vit_infer_int8", "eager", threads);
  using ftopt::bench::seconds_of;
  const std::vector<std::function<double()>> turns = {[&] { return seconds_of([&] { fp32->forward(x); }); },
                                                      [&] { return seconds_of([&] { int8->forward(x); }); },
                                                      [&] { return seconds_of([&] { bf16->forward(x_bf16); }); },
                                                      [&] { return py_fp32.step(); }, [&] { return py_int8.step(); }};
  for (int i = 0; i < 2; ++i)
    for (const auto& t : turns) t();
  const auto seconds = ftopt::bench::in_rotation(state, turns);
  using ftopt::bench::median;
  const InferenceRow row{median(seconds[0]) * 1e3, median(seconds[1]) * 1e3, median(seconds[2]) * 1e3,
                         median(seconds[3]) * 1e3, median(seconds[4]) * 1e3};
  state.counters["ftopt_fp32_ms"] = row.ftopt_fp32;
  state.counters["ftopt_int8_ms"] = row.ftopt_int8;
  state.counters["ftopt_bf16_ms"] = row.ftopt_bf16;
  state.counters["python_fp32_ms"] = row.python_fp32;
  state.counters["python_int8_ms"] = row.python_int8;
  inference_rows().push_back(row);
}

} // namespace

BENCHMARK(vit_fp32_full)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(vit_bf16_full)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(vit_bf16_lora)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(vit_bf16_dora)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(vit_bf16_vera)->Unit(benchmark::kMillisecond)->Iterations(12)->UseRealTime();
BENCHMARK(mlp_fp32_full)->Unit(benchmark::kMillisecond)->Iterations(400)->UseRealTime();
BENCHMARK(vit_inference)->Unit(benchmark::kMillisecond)->Iterations(10)->UseRealTime();

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::cout << "\n| step (" << bench_threads() << " threads, LibTorch " << TORCH_VERSION
            << ") | Python eager | Python torch.compile | ftopt (AdamW) | ftopt (FusedAdamW) | eager / ftopt | "
               "compile / ftopt | eager / ftopt fused | compile / ftopt fused | share of bf16 GEMM ceiling |\n"
            << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows()) {
    char line[400], ceiling[96] = "-";
    if (r.gemm_gflops > 0)
      std::snprintf(ceiling, sizeof ceiling, "%.0f%% of %.0f GFLOP/s", r.ceiling_pct, r.gemm_gflops);
    std::snprintf(line, sizeof line, "| %s | %.3f ms | %.3f ms | %.3f ms | %.3f ms | %.2fx | %.2fx | %.2fx | %.2fx | %s |\n",
                  r.name.c_str(), r.eager_ms, r.compile_ms, r.ftopt_ms, r.fused_ms, r.eager_ms / r.ftopt_ms,
                  r.compile_ms / r.ftopt_ms, r.eager_ms / r.fused_ms, r.compile_ms / r.fused_ms, ceiling);
    std::cout << line;
  }
  for (const auto& r : inference_rows()) {
    std::cout << "\n| ViT inference, batch 256 (" << bench_threads() << " threads) | Python fp32 | Python torch.ao int8 | "
                 "ftopt fp32 | ftopt DynamicInt8 | ftopt bf16 weights | ftopt int8 / Python int8 | best ftopt over "
                 "ftopt fp32 |\n|---|---|---|---|---|---|---|---|\n";
    char line[400];
    const double best = std::min(r.ftopt_int8, r.ftopt_bf16);
    std::snprintf(line, sizeof line, "| d-256 ViT | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.2fx | %.2fx |\n",
                  r.python_fp32, r.python_int8, r.ftopt_fp32, r.ftopt_int8, r.ftopt_bf16, r.python_int8 / r.ftopt_int8,
                  r.ftopt_fp32 / best);
    std::cout << line;
  }
}
