#pragma once
// --results FILE: the closing table as a result file, as the benchmarks write theirs
// ({"context": the machine and the run, "benchmarks": one entry per row}), so that
// scripts/report.py can file it (--store) under benchmarks/results/<machine>/ and render the
// documents' tables from it. Written atomically: a run that stops half-way leaves no file.
#include <chrono>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/hardware.hpp>
#include <ftopt/json.hpp>

#include "../../benchmarks/machine_context.hpp"
#include "runs.hpp"

namespace finetune {

/// The command line and when the run began, set once by main.
struct RunInfo {
  std::string command;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};
inline RunInfo run_info;

/// The context of a result file: the machine (machine_context.hpp), the date, the CPUs, the
/// executable name report.py files it under, the command and the run's wall time so far.
inline nlohmann::json results_context(const std::string& executable) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S+00:00", std::gmtime(&now));
  nlohmann::json context = {
      {"date", date},
      {"executable", executable},
      {"num_cpus", ftopt::hardware::available_cpus()},
      {"command", run_info.command},
      {"wall_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - run_info.started).count()}};
  for (const auto& [key, value] : ftopt::bench::machine_context(at::get_num_threads())) context[key] = value;
  return context;
}

/// Writes {"context", "benchmarks": rows} to `path` (nothing when `path` is empty).
inline void write_results(const std::string& path, nlohmann::json context, nlohmann::json rows) {
  if (path.empty()) return;
  const nlohmann::json out = {{"context", std::move(context)}, {"benchmarks", std::move(rows)}};
  ftopt::detail::write_atomically(path, "finetune --results", [&](std::ostream& o) { o << out.dump(1) << '\n'; });
  std::cerr << "results written to " << path << '\n';
}

/// The main job's rows (table.hpp's columns), the first the baseline whose time the speed-ups divide.
inline nlohmann::json table_results(const std::vector<Row>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    if (r.setup.empty()) continue;  // a row --rows left out
    out.push_back({{"name", r.setup},
                   {"run_type", "iteration"},
                   {"epoch_s", r.epoch_seconds},
                   {"data_wait_pct", 100 * r.data_wait},
                   {"peak_MiB", r.peak_mib},
                   {"trainable", r.trainable},
                   {"total_params", r.total},
                   {"test_acc_pct", 100 * r.test_accuracy},
                   {"speedup_x", rows.front().epoch_seconds / r.epoch_seconds},
                   {"fp32_acc_pct", 100 * r.fp32_accuracy},
                   {"bf16_acc_pct", 100 * r.bf16_accuracy},
                   {"bf16_speedup_x", r.bf16_speedup},
                   {"int8_acc_pct", 100 * r.int8_accuracy},
                   {"int8_speedup_x", r.int8_speedup}});
  }
  return out;
}

} // namespace finetune
