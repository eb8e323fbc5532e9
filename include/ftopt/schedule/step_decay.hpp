#pragma once
/// schedule::StepDecay: the lr times gamma every step_size optimizer steps, the closed form of
/// torch.optim.lr_scheduler.StepLR: factor(k) = gamma ^ floor(k / step_size) for optimizer step
/// k (0-based). PyTorch users often call StepLR.step() once per epoch; here the unit is always
/// the optimizer step, so an epoch-wise decay sets step_size to the optimizer steps per epoch.
///
///   ftopt::TrainerOptions options{.schedule = ftopt::schedule::StepDecay{.step_size = 500, .gamma = 0.1}};

#include <cmath>
#include <cstdint>

#include <ftopt/error.hpp>
#include <ftopt/schedule/concept.hpp>

namespace ftopt::schedule {

struct StepDecay {
  std::int64_t step_size = 1;  ///< optimizer steps between decays
  double gamma = 0.1;          ///< the multiplier applied at each decay

  void validate() const {
    ftopt::detail::check(step_size >= 1, "schedule::StepDecay: step_size must be >= 1, got ", step_size);
    ftopt::detail::check(gamma > 0.0 && std::isfinite(gamma),
                         "schedule::StepDecay: gamma must be finite and > 0, got ", gamma);
  }

  double factor(std::int64_t step) const { return std::pow(gamma, static_cast<double>(step / step_size)); }
};

} // namespace ftopt::schedule
