#pragma once
/// ftopt::memory::Policy: how the forward keeps activations, and how many micro-batches make
/// one optimizer step.
///
/// Minimal complete definition, for a policy P:
///   using axis = ftopt::axis::Memory;
///   template <ftopt::Model M> torch::Tensor forward(M& model, const torch::Tensor& input);
///                                                the model's forward, plain or recomputed in
///                                                the backward (checkpointed)
///   std::int64_t accumulation() const;           micro-batches per optimizer step, >= 1
/// Optional: `void validate() const`; `template <Model M> void prepare(M& model)`, called by
/// Trainer::prepare after the Peft and Precision policies (e.g. to switch on block checkpointing).
/// A policy that declares `static constexpr bool steps_in_backward = true` models
/// StepsInBackward below: the Trainer (trainer/stepping.hpp) attaches it to the trainable
/// parameters once, arms it with the optimizer before each backward and disarms it after, and
/// the policy steps each parameter inside the backward (memory::OptimizerInBackward). A policy
/// that declares it without the three hooks fails to compile with a sentence naming the first
/// one missing (trainer/slot_checks.hpp).
///
/// Laws:
///   - forward returns what model->forward(input) returns, with the same gradients;
///   - with accumulation() == N the Trainer divides each micro-batch loss by N and steps the
///     optimizer after every N-th micro-batch, so N micro-batches of b equal one batch of N*b
///     for a mean-reduced loss.
///
/// Models: memory::None, memory::Checkpoint, memory::OptimizerInBackward<Inner>.

#include <concepts>
#include <cstdint>
#include <vector>

#include <torch/optim/optimizer.h>

#include <ftopt/axis.hpp>
#include <ftopt/model.hpp>

namespace ftopt::memory {

template <class P>
concept Policy = PolicyOf<P, axis::Memory> && std::movable<P> &&
    requires(P& p, const P& cp, ftopt::detail::ArchetypeModel& model, const torch::Tensor& input) {
      { p.forward(model, input) } -> std::convertible_to<torch::Tensor>;
      { cp.accumulation() } -> std::convertible_to<std::int64_t>;
    };

/// The protocol of a Memory policy that steps the optimizer in the backward.
template <class P>
concept StepsInBackward =
    requires(P& p, const std::vector<torch::Tensor>& trainable, torch::optim::Optimizer& optimizer) {
      p.attach(trainable);  // once, after Trainer::prepare found the trainable parameters
      p.arm(optimizer);     // before each backward
      { p.disarm() } -> std::convertible_to<std::int64_t>;  // after it: how many parameters stepped
    };

} // namespace ftopt::memory
