#pragma once
/// Wall-clock seconds on the steady clock, as the Trainer's phase times and the Pipeline's
/// counters measure them.

#include <chrono>

namespace ftopt::detail {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline double seconds_since(Clock::time_point a) { return seconds_between(a, Clock::now()); }

} // namespace ftopt::detail
