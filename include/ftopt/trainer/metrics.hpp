#pragma once
/// trainer::Metrics: the Trainer's running record of a fit. It keeps the FitState callbacks see,
/// the epoch's phase times, optimizer steps taken and skipped, and the loss and accuracy sums
/// (device tensors: a step never waits for the host), and turns them into EpochStats at the end
/// of an epoch, summed over the ranks in one collective.

#include <cstdint>
#include <optional>

#include <c10/core/Device.h>

#include <ftopt/detail/clock.hpp>
#include <ftopt/detail/meter.hpp>
#include <ftopt/memory/support/peak.hpp>
#include <ftopt/state.hpp>

namespace ftopt::trainer {

class Metrics {
public:
  FitState fit;       ///< the live state of fit, as callbacks see it
  PhaseTimes phases;  ///< this epoch's, so far

  /// A fresh record for a fit of `epochs` that starts after `optimizer_steps` steps (a resume).
  void begin_fit(std::int64_t epochs, std::optional<std::int64_t> steps_per_epoch, int rank, int world_size,
                 std::int64_t optimizer_steps, double lr) {
    *this = Metrics{};
    fit.epochs = epochs;
    fit.steps_per_epoch = steps_per_epoch;
    fit.rank = rank;
    fit.world_size = world_size;
    fit.optimizer_steps = optimizer_steps;
    fit.lr = lr;
  }

  void begin_epoch(std::int64_t epoch, c10::Device device) {
    fit.epoch = epoch;
    fit.step = 0;
    fit.samples = 0;
    fit.classified = 0;
    fit.epoch_seconds = 0;
    meter_.emplace(device);
    fit.loss_sum = meter_->loss_sum;
    fit.correct = meter_->correct;
    phases = {};
    optimizer_steps_ = skipped_steps_ = 0;
    memory::PeakMemory::reset(device);
    epoch_start_ = detail::Clock::now();
  }

  /// A micro-batch's loss and predictions (train_step calls it, inside fit or not).
  void record(const at::Tensor& loss, const at::Tensor& output, const at::Tensor& target, c10::Device device) {
    fit.loss = loss.detach();
    if (!meter_) meter_.emplace(device);  // train_step called outside fit
    meter_->add(loss, output, target);
  }

  /// An optimizer step the precision policy took, or skipped (inf/NaN gradients).
  void count_optimizer_step(bool taken) {
    if (taken) {
      ++fit.optimizer_steps;
      ++optimizer_steps_;
    } else {
      ++skipped_steps_;
    }
  }

  /// After fit's micro-batch: the FitState fields callbacks read between steps.
  /// A training step's phases: forward from t0 to t1, backward to t2, optimizer step to t3.
  void record_phases(detail::Clock::time_point t0, detail::Clock::time_point t1, detail::Clock::time_point t2,
                     detail::Clock::time_point t3) {
    phases.forward += detail::seconds_between(t0, t1);
    phases.backward += detail::seconds_between(t1, t2);
    phases.optimizer += detail::seconds_between(t2, t3);
  }

  void end_micro_batch() {
    ++fit.step;
    fit.samples = meter_->samples;
    fit.classified = meter_->classified;
    fit.epoch_seconds = detail::seconds_since(epoch_start_);
  }

  /// The epoch's statistics; `reduce_sum` is the parallel policy's (one collective).
  template <class ReduceSum>
  EpochStats end_epoch(ReduceSum&& reduce_sum, double lr, c10::Device device) const {
    const auto totals = meter_->reduced(reduce_sum);
    EpochStats stats;
    stats.epoch = fit.epoch;
    stats.steps = fit.step;
    stats.optimizer_steps = optimizer_steps_;
    stats.skipped_steps = skipped_steps_;
    stats.samples = totals.samples;
    stats.loss = totals.mean_loss();
    stats.accuracy = totals.accuracy();
    stats.seconds = detail::seconds_since(epoch_start_);
    stats.samples_per_second = stats.seconds > 0 ? static_cast<double>(totals.samples) / stats.seconds : 0.0;
    stats.lr = lr;
    stats.phases = phases;
    stats.peak_memory = memory::PeakMemory::peak(device);
    return stats;
  }

private:
  std::optional<detail::Meter> meter_;
  std::int64_t optimizer_steps_ = 0;  ///< this epoch's
  std::int64_t skipped_steps_ = 0;    ///< this epoch's
  detail::Clock::time_point epoch_start_;
};

} // namespace ftopt::trainer
