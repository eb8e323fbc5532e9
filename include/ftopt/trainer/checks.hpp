#pragma once
/// What fit checks and reads before it trains: that the model was prepared and the optimizer
/// holds exactly the parameters prepare() returned, and the number of batches per epoch where the range knows it; and the
/// error a non-finite loss stops it with.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ranges>
#include <unordered_set>
#include <vector>

#include <torch/optim/optimizer.h>

#include <ftopt/error.hpp>
#include <ftopt/state.hpp>

namespace ftopt::trainer {

/// Throws naming the counts unless `optimizer` holds exactly `trainable` (in any groups).
inline void check_optimizer_holds(const std::vector<torch::Tensor>& trainable, const torch::optim::Optimizer& optimizer) {
  std::unordered_set<const void*> known;
  for (const auto& p : trainable) known.insert(p.unsafeGetTensorImpl());
  std::size_t held = 0, foreign = 0;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      ++held;
      if (!known.count(p.unsafeGetTensorImpl())) ++foreign;
    }
  check(foreign == 0 && held == trainable.size(), "Trainer::fit: the optimizer holds ", held, " parameters, ", foreign,
        " of them not trainable under the Peft policy, but prepare() returned ", trainable.size(),
        "; build the optimizer from prepare()'s result");
}

/// Throws unless fit's model is the one prepare() was called for (`prepared`) and the optimizer
/// holds the parameters prepare() returned.
inline void check_prepared(bool prepared, const std::vector<torch::Tensor>& trainable,
                           const torch::optim::Optimizer& optimizer) {
  check(prepared, "Trainer::fit: call trainer.prepare(model) first and build the optimizer from the parameters it "
        "returns (it attaches the Peft policy and moves the model)");
  check_optimizer_holds(trainable, optimizer);
}

/// The micro-batches per epoch of a sized range; none for an input range of unknown length.
template <class R>
std::optional<std::int64_t> steps_per_epoch(R& batches) {
  if constexpr (std::ranges::sized_range<R>) return static_cast<std::int64_t>(std::ranges::size(batches));
  else return std::nullopt;
}

/// Throws: the loss at this micro-batch is `value` (NaN or infinite), and what state it left.
[[noreturn]] inline void fail_non_finite_loss(double value, const FitState& at) {
  fail("Trainer: the loss is ", value, " at epoch ", at.epoch, ", step ", at.step, " (0-based); no backward or "
       "optimizer step was run for it, so the weights are those after optimizer step ", at.optimizer_steps);
}

} // namespace ftopt::trainer
