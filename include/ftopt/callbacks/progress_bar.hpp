#pragma once
/// callbacks::ProgressBar: one line per epoch, redrawn in place while the epoch runs:
///   epoch 1/3 [#########.........]  312/938  loss 0.5123  acc 81.2%  41,230 samples/s  ETA 0:05
/// On a terminal it redraws every `refresh_seconds`; into a file or pipe (CI logs) it writes
/// only the finished line of each epoch. Only rank 0 draws.
///
///   trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});
///   ftopt::callbacks::ProgressBar to_file({.out = &log_file});

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include <ftopt/state.hpp>

namespace ftopt::callbacks {

struct ProgressBarOptions {
  std::ostream* out = &std::cerr;
  int width = 24;                ///< characters in the bar
  double refresh_seconds = 0.1;  ///< at most this often on a terminal
  /// Redraw in place; unset: when `out` is std::cerr or std::cout on a terminal.
  std::optional<bool> interactive;
};

class ProgressBar {
public:
  ProgressBar(ProgressBarOptions options = {}) : options_(std::move(options)) {}  // NOLINT

  void on_fit_begin(const FitState&) {
    if (!options_.interactive) options_.interactive = is_terminal();
  }

  void on_step_end(const FitState& state) {
    if (!state.is_main() || !*options_.interactive) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::duration<double>(options_.refresh_seconds)) return;
    last_draw_ = now;
    *options_.out << '\r' << line(state, state.mean_loss(), state.accuracy(), state.samples) << std::flush;
  }

  void on_epoch_end(const FitState& state, const EpochStats& epoch) {
    if (!state.is_main()) return;
    auto& out = *options_.out;
    if (*options_.interactive) out << '\r';
    out << line(state, epoch.loss, epoch.accuracy, epoch.samples) << "  "
         << std::fixed << std::setprecision(1) << epoch.seconds << " s\n" << std::flush;
  }

  /// The text of the bar for a state and the metrics to show.
  std::string line(const FitState& state, double loss, std::optional<double> accuracy,
                   std::int64_t samples) const {
    std::ostringstream s;
    s << "epoch " << state.epoch + 1 << '/' << state.epochs << ' ';
    if (state.steps_per_epoch && *state.steps_per_epoch > 0) {
      const double done = static_cast<double>(state.step) / static_cast<double>(*state.steps_per_epoch);
      const int width = options_.width;
    const int filled = static_cast<int>(std::lround(done * width));
      s << '[' << std::string(static_cast<std::size_t>(filled), '#')
        << std::string(static_cast<std::size_t>(width - filled), '.') << "] "
        << std::setw(static_cast<int>(std::to_string(*state.steps_per_epoch).size()))
        << state.step << '/' << *state.steps_per_epoch;
    } else {
      s << "step " << state.step;
    }
    s << std::fixed << std::setprecision(4) << "  loss " << loss;
    if (accuracy) s << std::setprecision(1) << "  acc " << 100.0 * *accuracy << '%';
    const double rate = state.epoch_seconds > 0 ? samples / state.epoch_seconds : 0.0;
    s << "  " << std::setprecision(0) << rate << " samples/s";
    if (state.steps_per_epoch && state.step > 0 && state.step < *state.steps_per_epoch) {
      const double left = state.epoch_seconds * (*state.steps_per_epoch - state.step) / state.step;
      const auto secs = static_cast<long>(std::lround(left));
      s << "  ETA " << secs / 60 << ':' << std::setw(2) << std::setfill('0') << secs % 60;
    }
    return s.str();
  }

private:
  bool is_terminal() const {
    const std::ostream* out = options_.out;
    if (out == &std::cerr || out == &std::clog) return isatty(fileno(stderr));
    if (out == &std::cout) return isatty(fileno(stdout));
    return false;
  }

  ProgressBarOptions options_;
  std::chrono::steady_clock::time_point last_draw_{};
};

} // namespace ftopt::callbacks
