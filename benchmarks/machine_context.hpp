#pragma once
// The machine a result was measured on, as every result file of benchmarks/results/ names it:
// the CPU model and flags, the machine type the file is filed under
// (benchmarks/results/<machine>/), LibTorch's and ftopt's versions and the thread count. Used by
// the benchmarks (machine.hpp) and by apps/finetune --results; no Google Benchmark here.
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/version.h>

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

/// The machine's description, as (key, value) pairs for a result's context: CPU model and flags,
/// machine type, LibTorch, ftopt, threads.
inline std::vector<std::pair<std::string, std::string>> machine_context(int threads) {
  const auto flags = cpuinfo_field("flags");
  return {{"cpu_model", cpuinfo_field("model name")},
          {"cpu_flags", flags},
          {"machine", machine_type(cpuinfo_field("vendor_id"), flags)},
          {"libtorch", TORCH_VERSION},
          {"ftopt", ftopt::version},
          {"threads", std::to_string(threads)}};
}

} // namespace ftopt::bench
