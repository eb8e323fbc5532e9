#pragma once
/// schedule::WarmupLinear: linear warmup, then a linear decay to 0 at total_steps, the schedule
/// of Hugging Face's get_linear_schedule_with_warmup (the Trainer's default there). For optimizer
/// step k (0-based):
///   factor(k) = k / max(1, warmup_steps)                                   for k < warmup_steps
///   factor(k) = max(0, (total_steps - k) / max(1, total_steps - warmup_steps))   otherwise
/// total_steps = 0 lets the Trainer derive it from epochs and a sized batch range.
///
///   ftopt::TrainerOptions options{.schedule = ftopt::schedule::WarmupLinear{.warmup_steps = 100}};

#include <algorithm>
#include <cstdint>

#include <ftopt/schedule/concept.hpp>

namespace ftopt::schedule {

struct WarmupLinear {
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;  ///< optimizer steps over the whole fit; 0: derived

  void validate() const {
    detail::check_non_negative("WarmupLinear", "warmup_steps", warmup_steps);
    detail::check_non_negative("WarmupLinear", "total_steps", total_steps);
  }

  double factor(std::int64_t step) const {
    if (step < warmup_steps) return detail::warmup_ramp(step, warmup_steps);
    return std::max(0.0, static_cast<double>(total_steps - step) /
                             static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps)));
  }
};

} // namespace ftopt::schedule
