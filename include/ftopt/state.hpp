#pragma once
/// What the Trainer reports: a training step's result, the live state callbacks see during fit,
/// and the statistics of an epoch, an evaluation and a whole fit.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ftopt {

/// Seconds spent in each phase of the training steps of an epoch (this rank). On CUDA the
/// phases are host times: kernels still running are counted where the host next waits.
struct PhaseTimes {
  double data = 0;       ///< waiting for the next batch
  double forward = 0;    ///< forward and loss
  double backward = 0;   ///< backward, including gradient synchronisation
  double optimizer = 0;  ///< unscale, clipping, the optimizer step, zeroing gradients
};

/// One epoch of fit, summed over all ranks where it says so.
struct EpochStats {
  std::int64_t epoch = 0;            ///< 0-based
  std::int64_t steps = 0;            ///< micro-batches on this rank
  std::int64_t optimizer_steps = 0;  ///< optimizer steps taken in this epoch
  std::int64_t skipped_steps = 0;    ///< steps the precision policy skipped (inf/NaN gradients)
  std::int64_t samples = 0;          ///< samples, all ranks
  double loss = 0;                   ///< mean loss per sample, all ranks
  std::optional<double> accuracy;    ///< top-1, all ranks; set for classification targets
  double seconds = 0;                ///< wall time of the epoch
  double samples_per_second = 0;     ///< samples / seconds, all ranks
  double lr = 0;                     ///< learning rate of the first parameter group at the end
  PhaseTimes phases;
  /// Highest live tensor bytes on the trainer's device during the epoch, above what was live at
  /// its start (memory::PeakMemory; this rank; 0 where the device has no statistics).
  std::size_t peak_memory = 0;
};

/// The result of evaluate(): mean loss and accuracy over the batches, all ranks.
struct EvalStats {
  std::int64_t samples = 0;
  double loss = 0;
  std::optional<double> accuracy;
  double seconds = 0;
};

/// The result of fit().
struct FitSummary {
  std::vector<EpochStats> epochs;
  bool stopped_early = false;  ///< a callback asked to stop
  double seconds = 0;
};

/// What Trainer::train_step did.
struct StepResult {
  at::Tensor loss;  ///< this micro-batch's loss, detached, before division by accumulation
  /// The optimizer stepped after this micro-batch: false inside an accumulation window, and
  /// false when the precision policy skipped the step (a loss scaler on inf/NaN gradients).
  bool stepped = false;
};

/// The live state of fit, as callbacks see it. Running metrics stay tensors (no device sync on
/// each step); mean_loss() and accuracy() read them when a callback asks.
struct FitState {
  std::int64_t epoch = 0;            ///< 0-based
  std::int64_t epochs = 0;
  std::int64_t step = 0;             ///< micro-batches done in this epoch
  std::optional<std::int64_t> steps_per_epoch;  ///< known when the batch range is sized
  std::int64_t optimizer_steps = 0;  ///< since fit began
  std::int64_t samples = 0;          ///< samples done in this epoch, this rank
  double epoch_seconds = 0;          ///< since the epoch began
  double lr = 0;
  int rank = 0;
  int world_size = 1;
  at::Tensor loss;                   ///< the last micro-batch's loss, detached
  at::Tensor loss_sum;               ///< sum over this epoch's samples, this rank
  at::Tensor correct;                ///< correct top-1 predictions this epoch, this rank
  std::int64_t classified = 0;       ///< samples counted in `correct`

  bool is_main() const { return rank == 0; }
  double mean_loss() const {
    return samples > 0 ? loss_sum.item<double>() / static_cast<double>(samples) : 0.0;
  }
  std::optional<double> accuracy() const {
    if (classified == 0) return std::nullopt;
    return correct.item<double>() / static_cast<double>(classified);
  }
};

} // namespace ftopt
