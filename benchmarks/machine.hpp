#pragma once
// What every benchmark's JSON says about the machine it ran on, beside Google Benchmark's own
// context (date, host, CPU count, caches): machine_context.hpp's CPU model and flags, machine
// type (the folder of benchmarks/results/ the results are filed under), LibTorch's version and
// the thread count.
// FTOPT_BENCHMARK_MAIN() replaces BENCHMARK_MAIN() in each benchmark.
//
//   build/benchmarks/bench_peft --benchmark_out=peft.json --benchmark_out_format=json
#include <cstdlib>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <ftopt/hardware.hpp>

#include "machine_context.hpp"

namespace ftopt::bench {

/// The thread count the benchmarks run on: FTOPT_BENCH_THREADS, else every CPU this process may use.
inline int bench_threads() {
  const char* text = std::getenv("FTOPT_BENCH_THREADS");
  return text ? std::atoi(text) : ftopt::hardware::available_cpus();
}

/// Adds the machine's description (machine_context.hpp) to the context of the JSON Google
/// Benchmark writes.
inline void add_machine_context() {
  for (const auto& [key, value] : machine_context(bench_threads())) benchmark::AddCustomContext(key, value);
}

} // namespace ftopt::bench

/// BENCHMARK_MAIN() with the machine's description in the results' context.
#define FTOPT_BENCHMARK_MAIN()                                           \
  int main(int argc, char** argv) {                                      \
    benchmark::Initialize(&argc, argv);                                  \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;    \
    ftopt::bench::add_machine_context();                                 \
    benchmark::RunSpecifiedBenchmarks();                                 \
    benchmark::Shutdown();                                               \
    return 0;                                                            \
  }                                                                      \
  static_assert(true, "a semicolon follows FTOPT_BENCHMARK_MAIN()")
