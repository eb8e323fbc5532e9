#pragma once
/// TrainerOptions: the run-time settings of a Trainer that belong to no policy axis.
///
///   ftopt::TrainerOptions options{.epochs = 3, .clip_grad_norm = 1.0,
///                                 .schedule = ftopt::schedule::WarmupCosine{.warmup_steps = 50},
///                                 .threads = ftopt::hardware::all_cpus};

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>

#include <torch/nn/functional/loss.h>
#include <torch/types.h>

#include <ftopt/error.hpp>
#include <ftopt/hardware.hpp>
#include <ftopt/schedule/concept.hpp>
#include <ftopt/schedule/warmup_cosine.hpp>

namespace ftopt {

/// What fit does when a micro-batch's loss is NaN or infinite.
enum class NonFiniteLoss {
  Error,   ///< throw ftopt::Error naming the epoch and step; the weights stay as they were
  Ignore,  ///< no check (saves reading the loss on the host each step, a sync on CUDA)
};

/// The loss: (model output, target) -> scalar mean loss. Cross-entropy by default.
using LossFunction = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;

/// A class index outside the output's columns (other than PyTorch's ignore_index, -100) is an
/// ftopt::Error naming it, for targets on the CPU (ATen's own message names neither the model nor
/// the data).
inline torch::Tensor cross_entropy(const torch::Tensor& output, const torch::Tensor& target) {
  if (output.dim() == 2 && !target.is_floating_point() && target.device().is_cpu() && target.numel() > 0) {
    const auto classes = output.size(1);
    const auto outside = target.ne(-100).logical_and_(target.lt(0).logical_or_(target.ge(classes)));
    if (outside.any().item<bool>())
      detail::fail("cross_entropy: the target ", target.masked_select(outside)[0].item<std::int64_t>(),
                   " is outside the model's ", classes, " outputs (classes 0..", classes - 1,
                   "): the data has labels the model's head does not");
  }
  return torch::nn::functional::cross_entropy(output, target);
}

/// Where and how often fit writes a checkpoint (model, optimizer, progress, RNG states).
struct CheckpointOptions {
  std::filesystem::path path;
  std::int64_t every_epochs = 1;  ///< and always after the last epoch

  /// Whether a checkpoint is written after `epoch` (1-based) of `epochs`.
  bool due_after(std::int64_t epoch, std::int64_t epochs) const { return epoch % every_epochs == 0 || epoch == epochs; }
};

struct TrainerOptions {
  std::int64_t epochs = 1;
  /// Clip the global L2 norm of the trainable gradients to this value; 0 turns clipping off.
  double clip_grad_norm = 0.0;
  /// The learning-rate schedule: any schedule::Hook (schedule/concept.hpp); empty: none.
  schedule::Schedule schedule;
  /// Where the model and batches go; unset: CUDA when available, else the CPU.
  std::optional<torch::Device> device;
  LossFunction loss = cross_entropy;
  NonFiniteLoss on_non_finite_loss = NonFiniteLoss::Error;
  /// Intra-op threads that fit sets (at::set_num_threads) before training: a count, or
  /// hardware::all_cpus for OMP_NUM_THREADS or every CPU this process may use. Unset: fit leaves
  /// the thread count as it is (LibTorch's default, or what the program set).
  std::optional<int> threads;
  /// Print the one-line hardware report at the start of fit (rank 0 only).
  bool report_hardware = true;
  std::ostream* log = &std::cerr;
  /// Write a checkpoint during fit (rank 0 only), atomically; see Trainer::load_checkpoint.
  std::optional<CheckpointOptions> checkpoint;

  void validate() const {
    detail::check(epochs >= 1, "TrainerOptions: epochs must be >= 1, got ", epochs);
    detail::check(clip_grad_norm >= 0.0,
                  "TrainerOptions: clip_grad_norm must be >= 0 (0 = off), got ", clip_grad_norm);
    detail::check(static_cast<bool>(loss), "TrainerOptions: loss is empty");
    detail::check(log != nullptr, "TrainerOptions: log is null");
    schedule.validate();
    if (threads)
      detail::check(*threads >= 0, "TrainerOptions: threads must be >= 0 (hardware::all_cpus = 0), got ", *threads);
    if (checkpoint) {
      detail::check(!checkpoint->path.empty(), "TrainerOptions: checkpoint.path is empty");
      detail::check(checkpoint->every_epochs >= 1, "TrainerOptions: checkpoint.every_epochs must be >= 1, got ",
                    checkpoint->every_epochs);
    }
  }
};

} // namespace ftopt
