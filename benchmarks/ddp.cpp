// DDP on this machine, in one run: training throughput of one process against two ranks over
// Gloo, and how much of the gradient all-reduce parallel::Ddp hides behind the backward.
//
//   build/benchmarks/bench_ddp
//
// Started alone, it times one process (1 and 2 intra-op threads), then starts itself again as
// two ranks through parallel::launch (as ftopt-launch would); rank 0 times, side by side and
// in lockstep with rank 1, three ways to train each step of 2 x `batch` samples:
//   local      each rank steps on its own gradients: no communication (the floor)
//   after      backward, then one all-reduce of all gradients (what pytorch/examples#809
//              measured lagging DDP: nothing overlaps)
//   ddp        parallel::Ddp: buckets all-reduced by the Reducer while backward runs (DDP's
//              default 25 MB buckets, and 1 MB buckets: smaller ones start sooner)
// hidden share = (after - ddp) / (after - local): the part of the all-reduce's cost that DDP
// took off the step. Iteration counts are fixed so both ranks run the same collectives.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/parallel/ddp.hpp>
#include <ftopt/parallel/gloo.hpp>  // the backends: <ftopt.hpp> leaves them out
#include <ftopt/parallel/nccl.hpp>
#include <ftopt/parallel/support/launch.hpp>

#include "machine.hpp"
#include "side_by_side.hpp"

namespace {

namespace fp = ftopt::parallel;
constexpr std::int64_t kBatch = 64;  // per rank
constexpr std::int64_t kIterations = 20;

/// The baseline DDP replaced: all-reduce every gradient after backward, in one flat message.
struct AllReduceAfterBackward {
  using axis = ftopt::axis::Parallel;
  std::shared_ptr<fp::Group> group;
  std::vector<torch::Tensor> params;

  void setup(torch::nn::Module&, const std::vector<torch::Tensor>& trainable) { params = trainable; }
  void before_forward(bool) {}
  void before_backward(const torch::Tensor&, bool) {}
  void after_backward(bool sync) {
    if (!sync) return;
    std::vector<torch::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad());
    std::vector<torch::Tensor> flat{at::flatten_dense_tensors(grads)};
    group->allreduce_sum(flat);
    flat.front().div_(group->world_size());
    auto parts = at::unflatten_dense_tensors(flat.front(), grads);
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i].copy_(parts[i]);
  }
  torch::Tensor reduce_sum(const torch::Tensor& t) { return t; }
  int rank() const { return group->rank(); }
  int world_size() const { return group->world_size(); }
};
static_assert(fp::Policy<AllReduceAfterBackward>);

/// The main job's ViT (d 64, 4 layers, 139k parameters): little to send; or a deep MLP (8 x 512,
/// 2.3M parameters) whose gradients take about as long to send as to compute.
ftopt::models::ViT vit() {
  torch::manual_seed(0);
  return ftopt::models::ViT({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 64, .layers = 4,
                             .heads = 4, .intermediate = 128, .num_labels = 10});
}
ftopt::models::Mlp deep_mlp() {
  torch::manual_seed(0);
  return ftopt::models::Mlp({.in = 784, .hidden = std::vector<std::int64_t>(8, 512), .out = 10});
}

template <class Parallel, class Make>
struct Setup {
  Setup(Make make, Parallel parallel)
      : model(make()),
        trainer({.device = torch::kCPU, .report_hardware = false}, {}, {}, {}, std::move(parallel)),
        optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.01)),
        batch{torch::randn({kBatch, 1, 28, 28}), torch::randint(0, 10, {kBatch})} {}
  void step() { trainer.train_step(model, optimizer, batch); }

  decltype(std::declval<Make>()()) model;
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::None, Parallel> trainer;
  torch::optim::SGD optimizer;
  std::pair<torch::Tensor, torch::Tensor> batch;
};

template <class Make>
void one_process(benchmark::State& state, Make make) {
  const int threads = static_cast<int>(state.range(0));
  at::set_num_threads(threads);
  Setup<fp::Single, Make> single(make, {});
  ftopt::bench::side_by_side(state, {{"step", [&] { single.step(); }}});
  state.counters["samples_per_s"] = static_cast<double>(kBatch) / (state.counters["step_us"] * 1e-6);
  at::set_num_threads(1);
}

template <class Make>
void two_ranks(benchmark::State& state, Make make) {
  Setup<fp::Ddp, Make> ddp(make, fp::Ddp({.timeout = std::chrono::minutes(2)}));
  Setup<fp::Ddp, Make> ddp_1mb(make, fp::Ddp({.bucket_cap_mb = 1, .timeout = std::chrono::minutes(2)}));
  Setup<fp::Single, Make> local(make, {});
  Setup<AllReduceAfterBackward, Make> after(make, AllReduceAfterBackward{ddp.trainer.parallel().group(), {}});
  ftopt::bench::side_by_side(state, {{"local", [&] { local.step(); }},
                                     {"after", [&] { after.step(); }},
                                     {"ddp", [&] { ddp.step(); }},
                                     {"ddp_1mb", [&] { ddp_1mb.step(); }}});
  const double l = state.counters["local_us"], a = state.counters["after_us"];
  const int world = ddp.trainer.parallel().world_size();
  state.counters["allreduce_us"] = a - l;
  for (std::string name : {"ddp", "ddp_1mb"}) {
    const double d = state.counters[name + "_us"];
    state.counters[name + "_samples_per_s"] = static_cast<double>(world * kBatch) / (d * 1e-6);
    state.counters[name + "_hidden"] = (a - d) / (a - l);
  }
  const std::int64_t elements = ddp.trainer.parallel().reduced_elements();
  state.counters["gradient_MiB"] = static_cast<double>(elements) * 4 / (1 << 20);
}

/// DDP's all-reduce as a comm hook that also notes when each bucket is launched.
struct TimedAllReduce : c10d::CommHookInterface {
  TimedAllReduce(c10::intrusive_ptr<c10d::ProcessGroup> group, std::vector<std::chrono::steady_clock::time_point>* launches)
      : group(std::move(group)), launches(launches) {}
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    launches->push_back(std::chrono::steady_clock::now());
    std::vector<at::Tensor> tensors{bucket.getBufferRef()};
    tensors.front().div_(group->getSize());
    return group->allreduce(tensors)->getFuture();
  }
  // The future holds the all-reduced tensor list (c10d's own hooks read it the same way).
  at::Tensor parseHookResult(const c10::IValue& result) override { return result.toTensorVector().front(); }
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  std::vector<std::chrono::steady_clock::time_point>* launches;
};

/// The overlap as a timeline: in each step, when the buckets' all-reduces start against the
/// moment the last gradient is ready (the last bucket's launch). Rank 0 prints it.
void launch_timeline() {
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> launches;
  Setup<fp::Ddp, decltype(&deep_mlp)> ddp(deep_mlp, fp::Ddp({.bucket_cap_mb = 1, .timeout = std::chrono::minutes(2)}));
  ddp.trainer.parallel().register_comm_hook(
      std::make_unique<TimedAllReduce>(ddp.trainer.parallel().group()->get(), &launches));
  for (int i = 0; i < 3; ++i) ddp.step();  // buckets rebuilt after the first
  double early = 0, step = 0;
  std::size_t buckets = 0;
  constexpr int kSteps = 10;
  for (int i = 0; i < kSteps; ++i) {
    launches.clear();
    const auto start = Clock::now();
    ddp.step();
    step += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    early += std::chrono::duration<double, std::milli>(launches.back() - launches.front()).count();
    buckets += launches.size();
  }
  if (ddp.trainer.parallel().rank() == 0)
    std::cout << "\ndeep_mlp, Ddp with 1 MB buckets, 2 ranks: " << buckets / kSteps << " buckets per step; the first "
              << "all-reduce starts " << early / kSteps << " ms before the last gradient is ready (steps of "
              << step / kSteps << " ms): that much communication runs during the backward.\n";
}

/// The console reporter, keeping each run's counters for the summary table.
struct Recorder : benchmark::ConsoleReporter {
  std::map<std::string, std::map<std::string, double>> counters;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs)
      for (const auto& [name, c] : run.counters) counters[run.benchmark_name()][name] = c.value;
    ConsoleReporter::ReportRuns(runs);
  }
  double at(const std::string& prefix, const std::string& key) const {
    for (const auto& [name, values] : counters)
      if (name.rfind(prefix, 0) == 0 && values.count(key)) return values.at(key);
    return 0;
  }
};

} // namespace

int main(int argc, char** argv) {
  const char* rank = std::getenv("RANK");
  const char* summary_path = std::getenv("FTOPT_BENCH_DDP_OUT");
  if (rank == nullptr) {
    for (int threads : {1, 2}) {
      benchmark::RegisterBenchmark("one_process/vit", [](benchmark::State& s) { one_process(s, vit); })
          ->Arg(threads)->Iterations(kIterations)->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark("one_process/deep_mlp", [](benchmark::State& s) { one_process(s, deep_mlp); })
          ->Arg(threads)->Iterations(kIterations)->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  } else {
    benchmark::RegisterBenchmark("two_ranks/vit", [](benchmark::State& s) { two_ranks(s, vit); })
        ->Iterations(kIterations)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark("two_ranks/deep_mlp", [](benchmark::State& s) { two_ranks(s, deep_mlp); })
        ->Iterations(kIterations)->Unit(benchmark::kMillisecond)->UseRealTime();
    if (std::string(rank) != "0") std::freopen("/dev/null", "w", stdout);
  }
  benchmark::Initialize(&argc, argv);
  ftopt::bench::add_machine_context();  // the JSON result names its machine
  Recorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);
  if (rank != nullptr) {
    if (std::string(rank) == "0" && summary_path) std::ofstream(summary_path) << nlohmann::json(recorder.counters).dump();
    launch_timeline();
    return 0;
  }

  // The same binary as two ranks; rank 0 hands its counters back through a file.
  const auto out = std::filesystem::temp_directory_path() / ("ftopt-bench-ddp-" + std::to_string(::getpid()) + ".json");
  ::setenv("FTOPT_BENCH_DDP_OUT", out.c_str(), 1);
  std::cout << "\n-- two ranks (parallel::launch, Gloo, one thread each) --" << std::endl;
  const auto result = fp::launch({.nproc = 2}, {argv[0]});
  if (result.code() != 0) return result.code();
  const auto two = nlohmann::json::parse(std::ifstream(out)).get<std::map<std::string, std::map<std::string, double>>>();
  std::filesystem::remove(out);
  const auto at = [&](const std::string& prefix, const std::string& key) {
    for (const auto& [name, values] : two)
      if (name.rfind(prefix, 0) == 0 && values.count(key)) return values.at(key);
    return 0.0;
  };

  std::cout << "\nsamples/s (per-rank batch " << kBatch << "); hidden: share of the all-reduce's cost DDP took off the step\n"
            << "| model | gradients | 1 process, 1 thread | 1 process, 2 threads | 2 ranks, after backward | 2 ranks, Ddp "
               "| 2 ranks, Ddp 1 MB buckets | all-reduce per step | hidden (Ddp) | hidden (1 MB) |\n"
            << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (std::string model : {"vit", "deep_mlp"}) {
    const std::string two_prefix = "two_ranks/" + model;
    const double after_us = at(two_prefix, "after_us");
    std::cout << "| " << model << " | " << at(two_prefix, "gradient_MiB") << " MiB | "
              << recorder.at("one_process/" + model + "/1", "samples_per_s") << " | "
              << recorder.at("one_process/" + model + "/2", "samples_per_s") << " | "
              << (after_us > 0 ? 2 * kBatch / (after_us * 1e-6) : 0) << " | " << at(two_prefix, "ddp_samples_per_s") << " | "
              << at(two_prefix, "ddp_1mb_samples_per_s") << " | " << at(two_prefix, "allreduce_us") / 1000 << " ms | "
              << 100 * at(two_prefix, "ddp_hidden") << "% | " << 100 * at(two_prefix, "ddp_1mb_hidden") << "% |\n";
  }
  return 0;
}
