// Where one training step's time goes: the d-256 ViT of bench_precision / bench_peft (6 blocks,
// 4 heads, 4x4 patches of 28x28, batch 128, AdamW, FTOPT_BENCH_THREADS or all CPUs), a few steps
// under LibTorch's profiler, each op's self time (its time less the ops it called) summed over
// the recorded steps and printed as ms per step, largest first. The tables in docs/benchmarks.md
// come from it.
//
//   build/benchmarks/bench_profile_step [fp32|bf16] [full|lora|mlp|infer|infer-int8|bert-lora|bert-full|llama-lora]
//       [steps] [shapes]
// ("mlp": bench_python_peer's 784-64-10 MLP, batch 32, with optim::FusedAdamW; "infer": the
// ViT's forward in eval mode, batch 256, and "infer-int8" the same after quant::DynamicInt8;
// "bert-lora" and "bert-full": all-MiniLM-L6-v2's architecture, batch 32 x 128 tokens, the PEFT
// recipe's LoRA or full fine-tuning, optim::FusedAdamW; "llama-lora": bench_llm_peer's step,
// SmolLM2-135M's architecture, batch 8 x 256 tokens, LoRA r 16 on all seven projections, the
// fused loss.)
// ("shapes" keys each row by the op's input shapes too; FTOPT_PROFILE_CALLERS=1 by the four ops
// or autograd nodes that called it.) With FTOPT_PROFILE_OUT=FILE it also
// writes the table as JSON in Google Benchmark's shape (one run per op, ms per step, with the
// machine's context), which scripts/report.py --store files as profile_step_<precision>_<what>.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/loss/causal_lm.hpp>
#include <ftopt/models/llama.hpp>

#include "machine.hpp"
#include "models.hpp"

namespace {

namespace prof = torch::autograd::profiler;

struct Row {
  double self_us = 0;
  std::int64_t calls = 0;
};

/// Self time per op name over the events of every thread: a push opens a range, its pop closes
/// it, and a range's time less its children's is its own.
std::map<std::string, Row> self_times(const prof::thread_event_lists& lists, bool by_shape) {
  std::map<std::string, Row> rows;
  const bool callers = std::getenv("FTOPT_PROFILE_CALLERS") != nullptr;
  for (const auto& events : lists) {
    struct Open {
      const prof::LegacyEvent* push;
      double children_us;
    };
    std::vector<Open> stack;
    for (const auto& e : events) {
      if (e.kind() == prof::EventKind::PushRange) stack.push_back({&e, 0});
      else if (e.kind() == prof::EventKind::PopRange && !stack.empty()) {
        const Open open = stack.back();
        stack.pop_back();
        const double total = open.push->cpuElapsedUs(e);
        std::string key = open.push->name();
        if (by_shape) {
          std::ostringstream shapes;
          for (const auto& shape : open.push->shapes()) {
            shapes << " [";
            for (std::size_t i = 0; i < shape.size(); ++i) shapes << (i ? "," : "") << shape[i];
            shapes << "]";
          }
          key += shapes.str();
        }
        if (callers)  // the four enclosing ranges, nearest first
          for (std::size_t up = 0; up < 4 && up < stack.size(); ++up)
            key += " < " + std::string(stack[stack.size() - 1 - up].push->name());
        Row& row = rows[key];
        row.self_us += total - open.children_us;
        ++row.calls;
        if (!stack.empty()) stack.back().children_us += total;
      }
    }
  }
  return rows;
}

/// The rows as JSON in Google Benchmark's shape, to FTOPT_PROFILE_OUT's file (if set): the step
/// unprofiled and profiled, then each op with its ms per step, share and calls per step.
void write_json(const std::vector<std::pair<std::string, Row>>& sorted, double total_us, int steps,
                const std::string& what, double unprofiled_ms, double profiled_ms) {
  const char* path = std::getenv("FTOPT_PROFILE_OUT");
  if (path == nullptr) return;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S+00:00", std::gmtime(&now));
  std::string name = "profile_step_" + what;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  name.erase(std::unique(name.begin(), name.end(), [](char a, char b) { return a == '_' && b == '_'; }), name.end());
  nlohmann::json out;
  out["context"] = {{"date", date}, {"executable", "bench_" + name},
                    {"num_cpus", ftopt::hardware::available_cpus()}, {"what", what}};
  for (const auto& [key, value] : ftopt::bench::machine_context(ftopt::bench::bench_threads())) out["context"][key] = value;
  auto run = [](const std::string& op, double ms) {
    return nlohmann::json{{"name", op}, {"run_name", op}, {"run_type", "iteration"}, {"iterations", 1},
                          {"real_time", ms}, {"cpu_time", ms}, {"time_unit", "ms"}};
  };
  out["benchmarks"] = {run("step unprofiled", unprofiled_ms), run("step profiled", profiled_ms)};
  for (const auto& [op, row] : sorted) {
    if (row.self_us / total_us < 0.002) break;
    auto r = run(op, row.self_us / 1e3 / steps);
    r["share_pct"] = 100 * row.self_us / total_us;
    r["calls"] = static_cast<double>(row.calls) / steps;
    out["benchmarks"].push_back(r);
  }
  std::ofstream(path) << out.dump(1) << "\n";
}

/// The rows, largest self time first, down to 0.2% of the total.
void print(const std::map<std::string, Row>& rows, int steps, const std::string& what, double unprofiled_ms,
           double profiled_ms) {
  std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
  double total_us = 0;
  for (const auto& [name, row] : sorted) total_us += row.self_us;
  std::printf("%s, %d threads: %.1f ms per step unprofiled, %.1f ms profiled, %.1f ms of op self time\n", what.c_str(),
              at::get_num_threads(), unprofiled_ms, profiled_ms, total_us / 1e3 / steps);
  std::printf("%-60s %10s %7s %8s\n", "op", "ms/step", "share", "calls");
  for (const auto& [name, row] : sorted) {
    if (row.self_us / total_us < 0.002) break;
    std::printf("%-60s %10.2f %6.1f%% %8.1f\n", name.c_str(), row.self_us / 1e3 / steps, 100 * row.self_us / total_us,
                static_cast<double>(row.calls) / steps);
  }
  write_json(sorted, total_us, steps, what, unprofiled_ms, profiled_ms);
}

/// Times `steps` calls of `run` unprofiled, then profiles as many and prints the table.
template <class Run>
void profile_calls(Run run, int steps, bool by_shape, const std::string& what) {
  auto timed = [&] {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) run();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
  };
  for (int i = 0; i < 2; ++i) run();
  const double unprofiled_ms = timed();
  prof::enableProfilerLegacy(prof::ProfilerConfig(prof::ProfilerState::CPU, /*report_input_shapes=*/by_shape));
  const double profiled_ms = timed();
  print(self_times(prof::disableProfilerLegacy(), by_shape), steps, what, unprofiled_ms, profiled_ms);
}

/// `what` names the case in the table and the JSON file (default: "<precision>, <peft>").
template <class Precision, class Peft, class Optimizer = torch::optim::AdamW, class Model>
int profile(Peft peft, Model model, std::pair<torch::Tensor, torch::Tensor> batch, int steps, bool by_shape,
            std::string what = "", ftopt::LossFunction loss = ftopt::cross_entropy) {
  ftopt::Trainer<Precision, Peft> trainer({.device = torch::kCPU, .loss = std::move(loss), .report_hardware = false}, {},
                                          std::move(peft));
  Optimizer optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-4));
  if (what.empty()) what = std::string(Precision::name) + ", " + Peft::name;
  profile_calls([&] { trainer.train_step(model, optimizer, batch); }, steps, by_shape, what);
  return 0;
}

/// The ViT profiled: the d-256 ViT, or (FTOPT_PROFILE_MODEL=main) the main job's default.
const ftopt::models::ViTOptions& vit_options() {
  const char* model = std::getenv("FTOPT_PROFILE_MODEL");
  return model && std::string(model) == "main" ? ftopt::bench::vit_main : ftopt::bench::vit_d256;
}
ftopt::models::ViT vit() {
  torch::manual_seed(0);
  return ftopt::models::ViT(vit_options());
}
std::pair<torch::Tensor, torch::Tensor> images() {
  return {torch::randn({128, 1, 28, 28}), torch::randint(0, vit_options().num_labels, {128})};
}

template <class Precision>
int with_peft(const std::string& peft, int steps, bool by_shape) {
  if (peft == "full") return profile<Precision>(ftopt::peft::Full{}, vit(), images(), steps, by_shape);
  if (peft == "lora")
    return profile<Precision>(
        ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "value"}, .modules_to_save = {"classifier"}}),
        vit(), images(), steps, by_shape);
  if (peft == "lora-all")  // the main job's LoRA: every Linear of the blocks
    return profile<Precision>(ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "key", "value", "dense"},
                                                 .modules_to_save = {"classifier"}}),
                              vit(), images(), steps, by_shape);
  if (peft == "bert-lora" || peft == "bert-full") {  // the main job's text model, batch 32 x 128 tokens
    torch::manual_seed(0);
    ftopt::models::Bert bert(ftopt::bench::minilm);
    auto batch = ftopt::bench::minilm_batch();
    const std::string what = std::string(Precision::name) + ", " + peft;
    if (peft == "bert-full")
      return profile<Precision, ftopt::peft::Full, ftopt::optim::FusedAdamW>(ftopt::peft::Full{}, bert, batch, steps,
                                                                             by_shape, what);
    return profile<Precision, ftopt::peft::Lora, ftopt::optim::FusedAdamW>(
        ftopt::peft::Lora({.r = 8, .alpha = 16, .dropout = 0.1, .targets = {"query", "value"},
                           .modules_to_save = {"classifier"}}),
        bert, batch, steps, by_shape, what);
  }
  if (peft == "llama-lora") {  // bench_llm_peer's step: SmolLM2-135M, LoRA r 16 on 7 projections, fused loss
    torch::manual_seed(0);
    ftopt::models::Llama llama(ftopt::models::LlamaOptions{});
    llama->output_hidden = true;
    const auto ids = torch::randint(100, 49000, {8, 256}, torch::kLong);
    return profile<Precision, ftopt::peft::Lora, ftopt::optim::FusedAdamW>(
        ftopt::peft::Lora({.r = 16, .alpha = 32, .dropout = 0.05,
                           .targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}),
        llama, std::pair{ids, ids}, steps, by_shape, std::string(Precision::name) + ", " + peft,
        ftopt::loss::fused_causal_lm([m = llama.ptr()] { return m->head_weight(); }));
  }
  if (peft == "mlp")  // bench_python_peer's MLP: 784-64-10, batch 32, full, FusedAdamW
    return profile<Precision, ftopt::peft::Full, ftopt::optim::FusedAdamW>(
        ftopt::peft::Full{}, ftopt::models::Mlp({.in = 784, .hidden = {64}, .out = 10}),
        {torch::randn({32, 784}), torch::randint(0, 10, {32})}, steps, by_shape);
  if (peft == "infer" || peft == "infer-int8") {  // inference, batch 256, eval, no gradients
    torch::NoGradGuard no_grad;
    auto model = vit();
    model->eval();
    if (peft == "infer-int8") ftopt::quant::DynamicInt8{}.convert(*model);
    const auto x = torch::randn({256, 1, 28, 28});
    profile_calls([&] {
      ftopt::compat::AutocastScope scope(torch::kCPU, torch::kBFloat16, std::is_same_v<Precision, ftopt::precision::Bf16Mixed>);
      model->forward(x);
    }, steps, by_shape, std::string(Precision::name) + ", " + peft);
    return 0;
  }
  std::fprintf(stderr, "bench_profile_step: the second argument must be full, lora, mlp, infer or infer-int8, got '%s'\n", peft.c_str());
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  const std::string precision = argc > 1 ? argv[1] : "bf16";
  const std::string peft = argc > 2 ? argv[2] : "lora";
  const int steps = argc > 3 ? std::stoi(argv[3]) : 3;
  const bool by_shape = argc > 4 && std::string(argv[4]) == "shapes";
  at::set_num_threads(ftopt::bench::bench_threads());
  if (precision == "fp32") return with_peft<ftopt::precision::Fp32>(peft, steps, by_shape);
  if (precision == "bf16") return with_peft<ftopt::precision::Bf16Mixed>(peft, steps, by_shape);
  std::fprintf(stderr, "bench_profile_step: precision must be fp32 or bf16, got '%s'\n", precision.c_str());
  return 2;
}
