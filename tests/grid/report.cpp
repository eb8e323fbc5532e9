// Tests for include/ftopt/grid/report.hpp: the marks (flags below the bound, the Pareto front) and
// the choice autotune makes from them.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/grid/report.hpp>

#include "../support.hpp"
#include "sample_report.hpp"

using namespace ftopt;

TEST_CASE("Report: flags below the bound and the Pareto front", "[grid]") {
  const auto report = test::sample_report();
  // Baseline 90.0%, bound 0.5 points: adapter (89.0) and freeze (88.0) are flagged.
  CHECK_FALSE(report.results[1].flagged);
  CHECK(report.results[2].flagged);
  CHECK(report.results[4].flagged);
  // The front: lora (fastest), prefix (most accurate), and full, which neither beats on both
  // counts (lora is faster but less accurate, prefix more accurate but slower).
  CHECK(report.results[0].pareto);
  CHECK(report.results[1].pareto);
  CHECK(report.results[3].pareto);
  CHECK_FALSE(report.results[2].pareto);  // lora is faster and more accurate
  CHECK_FALSE(report.results[4].pareto);
  CHECK_FALSE(report.results[5].pareto);  // did not run
  CHECK(report.fastest_within_bound().combination.peft == "lora");
}

TEST_CASE("Report::fastest_within_bound picks by the numbers, not by position", "[grid]") {
  // A report written by hand: what autotune chooses from. The baseline is 10 ms at 90%.
  grid::Report report;
  report.bound = 0.005;
  const auto result = [](std::string peft, double ms, double accuracy, std::string error = "") {
    return grid::Result{.combination = {.peft = std::move(peft)}, .step_ms = ms, .accuracy = accuracy,
                        .error = std::move(error)};
  };
  report.results = {result("full", 10, 0.900), result("lora", 6, 0.880), result("adapter", 7, 0.896),
                    result("prefix", 2, 0.0, "did not run")};
  // lora is fastest but 2 points down; prefix did not run; adapter is 0.4 points down: within.
  CHECK(report.fastest_within_bound().combination.peft == "adapter");
  report.bound = 0.03;  // now lora's 2 points are within
  CHECK(report.fastest_within_bound().combination.peft == "lora");
  report.bound = 0.0;   // nothing below the baseline's accuracy: the baseline
  CHECK(report.fastest_within_bound().combination.peft == "full");
}
