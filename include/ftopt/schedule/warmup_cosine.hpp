#pragma once
/// schedule::WarmupCosine: linear warmup, then cosine decay, the schedule of Hugging Face's
/// get_cosine_schedule_with_warmup (and ..._with_min_lr_schedule_with_warmup for min_lr_ratio).
/// For optimizer step k (0-based), lr = base_lr * factor(k), with
///   factor(k) = k / max(1, warmup_steps)                                   for k < warmup_steps
///   p = (k - warmup_steps) / max(1, total_steps - warmup_steps)
///   c = max(0, 0.5 * (1 + cos(pi * p)))
///   factor(k) = min_lr_ratio + (1 - min_lr_ratio) * c                      otherwise
/// total_steps = 0 lets the Trainer derive it from epochs and a sized batch range.
///
///   ftopt::TrainerOptions options{.schedule = ftopt::schedule::WarmupCosine{.warmup_steps = 100}};

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include <ftopt/error.hpp>
#include <ftopt/schedule/concept.hpp>

namespace ftopt::schedule {

struct WarmupCosine {
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;  ///< optimizer steps over the whole fit; 0: derived
  double min_lr_ratio = 0.0;     ///< the floor of the decay, as a fraction of the base lr

  void validate() const {
    detail::check_non_negative("WarmupCosine", "warmup_steps", warmup_steps);
    detail::check_non_negative("WarmupCosine", "total_steps", total_steps);
    ftopt::detail::check(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0,
                         "schedule::WarmupCosine: min_lr_ratio must be in [0, 1], got ", min_lr_ratio);
  }

  /// The multiplier of the base learning rate at optimizer step `step` (0-based).
  double factor(std::int64_t step) const {
    if (step < warmup_steps) return detail::warmup_ramp(step, warmup_steps);
    double progress = static_cast<double>(step - warmup_steps) /
                      static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
    double cosine = std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
    return min_lr_ratio + (1.0 - min_lr_ratio) * cosine;
  }
};

} // namespace ftopt::schedule
