#pragma once
/// schedule::ConstantWithWarmup: linear warmup, then the base lr for good, the schedule of
/// Hugging Face's get_constant_schedule_with_warmup. For optimizer step k (0-based):
///   factor(k) = k / max(1, warmup_steps) for k < warmup_steps, else 1.
/// It does not depend on the length of the fit, so it works over unsized batch ranges.
///
///   ftopt::TrainerOptions options{.schedule = ftopt::schedule::ConstantWithWarmup{.warmup_steps = 100}};

#include <cstdint>

#include <ftopt/schedule/concept.hpp>

namespace ftopt::schedule {

struct ConstantWithWarmup {
  std::int64_t warmup_steps = 0;

  void validate() const { detail::check_non_negative("ConstantWithWarmup", "warmup_steps", warmup_steps); }

  double factor(std::int64_t step) const {
    return step < warmup_steps ? detail::warmup_ramp(step, warmup_steps) : 1.0;
  }
};

} // namespace ftopt::schedule
