#pragma once
// The main job's closing table (Markdown, on stdout), after the machine it was measured on.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "runs.hpp"

namespace finetune {

/// "Machine: <CPU model> (<its matrix and vector extensions>), N threads" from /proc/cpuinfo.
inline std::string machine_line() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU", flags;
  while (std::getline(cpuinfo, line)) {
    const auto value = line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 1);
    if (line.starts_with("model name") && model == "unknown CPU") model = value.substr(value.find_first_not_of(' '));
    if (line.starts_with("flags") && flags.empty()) flags = value;
  }
  std::istringstream words(flags);
  std::set<std::string> have;
  for (std::string w; words >> w;) have.insert(w);
  std::string shown;
  for (const char* f : {"amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f", "avx2"})
    if (have.count(f)) shown += (shown.empty() ? "" : ", ") + std::string(f);
  return "Machine: " + model + " (" + (shown.empty() ? "no AVX2" : shown) + "), " +
         std::to_string(at::get_num_threads()) + " threads";
}

inline void print_table(const std::vector<Row>& rows) {
  std::cout << machine_line() << "\n";
  std::cout << "\n| setup | s / epoch | data wait | peak MiB | trainable params | test acc | speed-up "
               "| fp32 inference acc | bf16 weights acc, speed-up | int8 acc, speed-up |\n"
            << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    if (r.setup.empty()) continue;  // a row --rows left out
    std::cout << std::fixed << "| " << r.setup << " | " << std::setprecision(1) << r.epoch_seconds << " | "
              << 100.0 * r.data_wait << "% | " << r.peak_mib << " | " << r.trainable << " / " << r.total << " | "
              << std::setprecision(2) << 100.0 * r.test_accuracy << "% | "
              << rows.front().epoch_seconds / r.epoch_seconds << "x | " << 100.0 * r.fp32_accuracy << "% | "
              << 100.0 * r.bf16_accuracy << "%, " << r.bf16_speedup << "x | " << 100.0 * r.int8_accuracy << "%, "
              << r.int8_speedup << "x |\n";
  }
}

} // namespace finetune
