#pragma once
/// trainer::LearningRate: the Trainer's side of a learning-rate schedule. At the start of a fit
/// it keeps each parameter group's lr as its base (or the bases a checkpoint restored, since the
/// schedule scales the lrs in place) and fills in a schedule's total_steps from the fit's length;
/// before each optimizer step it sets every group's lr to base x factor(step).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>

#include <ftopt/error.hpp>
#include <ftopt/schedule/concept.hpp>

namespace ftopt::trainer {

class LearningRate {
public:
  /// `steps_per_epoch`: micro-batches per epoch when the batch range is sized; `accumulation`:
  /// micro-batches per optimizer step. `restored`: base lrs from a checkpoint, or empty.
  void begin_fit(const schedule::Schedule& schedule, torch::optim::Optimizer& optimizer, std::int64_t epochs,
                 std::optional<std::int64_t> steps_per_epoch, std::int64_t accumulation, std::vector<double> restored) {
    base_lrs_ = std::move(restored);
    if (base_lrs_.empty())
      for (auto& group : optimizer.param_groups()) base_lrs_.push_back(group.options().get_lr());
    schedule_ = schedule;
    if (schedule_.needs_total_steps()) {
      ftopt::detail::check(steps_per_epoch.has_value(),
                           "TrainerOptions::schedule: total_steps is 0 and the batch range has no "
                           "size to derive it from; set the schedule's total_steps");
      schedule_ = schedule_.spanning(epochs * ((*steps_per_epoch + accumulation - 1) / accumulation));
    }
  }

  /// Sets the groups' lrs for optimizer step `step` (0-based); returns the first group's. The
  /// Trainer calls it only when there is a schedule.
  double apply(torch::optim::Optimizer& optimizer, std::int64_t step) const {
    auto& groups = optimizer.param_groups();
    const double factor = schedule_.factor(step);
    for (std::size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i)
      groups[i].options().set_lr(base_lrs_[i] * factor);
    return first_lr(optimizer);
  }

  const std::vector<double>& base_lrs() const { return base_lrs_; }
  double first_base_lr() const { return base_lrs_.empty() ? 0.0 : base_lrs_.front(); }

  static double first_lr(torch::optim::Optimizer& optimizer) {
    return optimizer.param_groups().empty() ? 0.0 : optimizer.param_groups().front().options().get_lr();
  }

private:
  schedule::Schedule schedule_;  ///< with total_steps filled in
  std::vector<double> base_lrs_;
};

} // namespace ftopt::trainer
