#pragma once
// The main job's closing table (Markdown, on stdout).
#include <iomanip>
#include <iostream>
#include <vector>

#include "runs.hpp"

namespace finetune {

inline void print_table(const std::vector<Row>& rows) {
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
