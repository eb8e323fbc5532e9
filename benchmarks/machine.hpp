#pragma once
// What every benchmark's JSON says about the machine it ran on, beside Google Benchmark's own
// context (date, host, CPU count, caches): the CPU model and flags, the machine type the results
// are filed under (benchmarks/results/<machine>/), LibTorch's version and the thread count.
// FTOPT_BENCHMARK_MAIN() replaces BENCHMARK_MAIN() in each benchmark.
//
//   build/benchmarks/bench_peft --benchmark_out=peft.json --benchmark_out_format=json
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <ftopt/hardware.hpp>
#include <ftopt/version.hpp>

namespace ftopt::bench {

/// The value of the first "key : value" line of /proc/cpuinfo whose key is `key` ("" if none).
inline std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    auto name = line.substr(0, colon);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    if (name == key) return colon + 2 <= line.size() ? line.substr(colon + 2) : "";
  }
  return "";
}

/// The machine type results are filed under: the vendor and the widest matrix instructions the
/// CPU has (intel-amx, intel-avx512bf16, amd-avx512bf16, intel-avx2, ...). Figures from
/// different types never share a row.
inline std::string machine_type(const std::string& vendor, const std::string& flags) {
  std::istringstream words(flags);
  const std::set<std::string> has{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  const std::string who = vendor == "GenuineIntel" ? "intel" : vendor == "AuthenticAMD" ? "amd" : "cpu";
  if (has.count("amx_bf16")) return who + "-amx";
  if (has.count("avx512_bf16")) return who + "-avx512bf16";
  if (has.count("avx512f")) return who + "-avx512";
  if (has.count("avx2")) return who + "-avx2";
  return who + "-baseline";
}

/// The thread count the benchmarks run on: FTOPT_BENCH_THREADS, else every CPU this process may use.
inline int bench_threads() {
  const char* text = std::getenv("FTOPT_BENCH_THREADS");
  return text ? std::atoi(text) : ftopt::hardware::available_cpus();
}

/// The machine's description, as (key, value) pairs for a result's context: CPU model and flags,
/// machine type, LibTorch, ftopt, threads.
inline std::vector<std::pair<std::string, std::string>> machine_context() {
  const auto flags = cpuinfo_field("flags");
  return {{"cpu_model", cpuinfo_field("model name")},
          {"cpu_flags", flags},
          {"machine", machine_type(cpuinfo_field("vendor_id"), flags)},
          {"libtorch", TORCH_VERSION},
          {"ftopt", ftopt::version},
          {"threads", std::to_string(bench_threads())}};
}

/// Adds the machine's description to the context of the JSON Google Benchmark writes.
inline void add_machine_context() {
  for (const auto& [key, value] : machine_context()) benchmark::AddCustomContext(key, value);
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
