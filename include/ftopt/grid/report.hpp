#pragma once
/// grid::Report: what running a grid measured, one Result per combination (the baseline
/// first), marked: every combination more than `bound` below the baseline's accuracy flagged,
/// the Pareto front (no other combination both faster and more accurate) marked, and the
/// fastest within the bound chosen (what autotune returns). As documents (terminal and
/// Markdown tables, JSON, an SVG plot): the report layer, <ftopt/report/grid.hpp>.
///
///   grid::Report report = grid::run<Grid>(...);     // grid/run.hpp
///   report.fastest_within_bound().combination;

#include <cstdint>
#include <string>
#include <vector>

#include <ftopt/error.hpp>
#include <ftopt/grid/grid.hpp>

namespace ftopt::grid {

/// One combination's measurements.
struct Result {
  Combination combination;
  double step_ms = 0;             ///< mean training step (micro-batch) time, after the first step
  double samples_per_second = 0;  ///< training throughput
  double peak_mib = 0;            ///< peak memory while training (memory::peak)
  std::int64_t trainable = 0;     ///< trainable parameters
  double accuracy = 0;            ///< held-out accuracy of the final (merged, converted) model
  double inference_ms = 0;        ///< held-out evaluation time of the final model
  std::string error;              ///< why it did not run ("" when it did)
  bool flagged = false;           ///< accuracy more than the bound below the baseline's
  bool pareto = false;            ///< on the speed-accuracy Pareto front
  bool ran() const { return error.empty(); }
};

struct Report {
  std::vector<Result> results;    ///< the baseline first
  std::vector<Excluded> excluded;
  double bound = 0.005;           ///< accuracy drop (a fraction: 0.005 = 0.5 points) flagged
  std::string title = "ftopt policy grid";

  const Result& baseline() const {
    ftopt::detail::check(!results.empty() && results.front().ran(), "grid::Report: no baseline result");
    return results.front();
  }

  /// Sets `flagged` and `pareto` from the measurements.
  void mark() {
    const double floor = baseline().accuracy - bound;
    for (auto& r : results) {
      r.flagged = r.ran() && r.accuracy < floor - 1e-12;
      r.pareto = r.ran();
      for (const auto& o : results)
        if (&o != &r && o.ran() && o.step_ms <= r.step_ms && o.accuracy >= r.accuracy &&
            (o.step_ms < r.step_ms || o.accuracy > r.accuracy))
          r.pareto = false;
    }
  }

  /// The fastest combination whose accuracy is within the bound of the baseline's.
  const Result& fastest_within_bound() const {
    const Result* best = &baseline();
    for (const auto& r : results)
      if (r.ran() && r.accuracy >= baseline().accuracy - bound - 1e-12 && r.step_ms < best->step_ms) best = &r;
    return *best;
  }
};

} // namespace ftopt::grid
