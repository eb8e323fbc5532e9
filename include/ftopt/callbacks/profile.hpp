#pragma once
/// callbacks::Profile: records a few training steps with LibTorch's profiler and writes a
/// Chrome trace (open it in chrome://tracing or ui.perfetto.dev): every ATen op, and around
/// them ftopt's own phases of each step, "ftopt::data" (waiting for the batch),
/// "ftopt::forward", "ftopt::backward" and "ftopt::optimizer_step". Look where the time goes
/// before choosing policies.
///
///   trainer.fit(model, optimizer, batches, ftopt::callbacks::Profile({.path = "trace.json"}));
///
/// Steps 1..wait run unrecorded (the first steps pay one-time costs: allocations, oneDNN
/// primitive creation); the next `steps` are recorded. The trace is written atomically when
/// they are done, or when fit ends first. The profiler is LibTorch's legacy (non-Kineto) CPU
/// profiler, which every build has; it records the thread that trains (the Trainer's thread),
/// not a pipeline's prefetch workers.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <sstream>
#include <utility>

#include <torch/csrc/autograd/profiler_legacy.h>

#include <ftopt/callbacks/callback.hpp>
#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/error.hpp>
#include <ftopt/state.hpp>

namespace ftopt::callbacks {

struct ProfileOptions {
  std::filesystem::path path = "ftopt-trace.json";
  std::int64_t wait = 1;   ///< steps before recording starts
  std::int64_t steps = 3;  ///< steps recorded

  void validate() const {
    ftopt::detail::check(wait >= 0 && steps >= 1, "callbacks::Profile: wait must be >= 0 and steps >= 1, got wait ",
                         wait, ", steps ", steps);
  }
};

class Profile {
public:
  explicit Profile(ProfileOptions options = {}) : options_(std::move(options)) { options_.validate(); }

  void on_fit_begin(const FitState& s) {
    if (s.rank != 0) return;
    seen_ = 0;
    if (options_.wait == 0) start();
  }

  void on_step_end(const FitState& s) {
    if (s.rank != 0) return;
    ++seen_;
    if (seen_ == options_.wait) start();
    else if (seen_ == options_.wait + options_.steps) stop();
  }

  void on_fit_end(const FitSummary&) { stop(); }

  /// Whether the trace was written.
  bool written() const { return written_; }

private:
  void start() {
    trace_ = std::make_shared<std::ostringstream>();
    recording_ = std::make_shared<torch::autograd::profiler::RecordProfile>(*trace_);
  }
  void stop() {
    if (!recording_) return;
    recording_.reset();  // RecordProfile writes the events as it ends
    ftopt::detail::write_atomically(options_.path, "callbacks::Profile", [&](std::ostream& out) { out << trace_->str(); });
    trace_.reset();
    written_ = true;
  }

  ProfileOptions options_;
  std::int64_t seen_ = 0;
  std::shared_ptr<std::ostringstream> trace_;
  std::shared_ptr<torch::autograd::profiler::RecordProfile> recording_;
  bool written_ = false;
};

} // namespace ftopt::callbacks
