#pragma once
// A marked grid report written by hand, for the tests of its marks (grid/grid.cpp) and of its
// documents (report/grid.cpp): five results that ran (full, lora, adapter, prefix, freeze), one
// that did not, and one excluded combination; baseline 90%, bound 0.5 points.
#include <string>
#include <utility>

#include <ftopt/grid/report.hpp>
#include <ftopt/rules.hpp>

namespace ftopt::test {

inline grid::Report sample_report() {
  const auto result = [](std::string peft, double ms, double accuracy, double mib) {
    return grid::Result{.combination = {.peft = std::move(peft)}, .step_ms = ms, .peak_mib = mib, .accuracy = accuracy};
  };
  grid::Report report;
  report.bound = 0.005;
  report.results = {result("full", 10, 0.900, 40), result("lora", 6, 0.897, 20), result("adapter", 7, 0.890, 25),
                    result("prefix", 12, 0.905, 30), result("freeze", 11, 0.880, 10)};
  report.results.push_back({.combination = grid::Combination{.quant = "qat"}, .error = "refused | badly"});
  report.excluded = {{grid::Combination{.precision = "fp16", .quant = "qat"}, rules::rule::fake_quant_under_fp16}};
  report.mark();
  return report;
}

} // namespace ftopt::test
