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
/// A policy that declares `static constexpr bool steps_in_backward = true` also has
/// `attach(trainable)`, `arm(optimizer)` and `disarm() -> std::int64_t`: the Trainer steps the
/// optimizer inside the backward through it (memory::OptimizerInBackward).
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

#include <ftopt/axis.hpp>
#include <ftopt/model.hpp>

namespace ftopt::memory {

template <class P>
concept Policy = PolicyOf<P, axis::Memory> && std::movable<P> &&
    requires(P& p, const P& cp, ftopt::detail::ArchetypeModel& model, const torch::Tensor& input) {
      { p.forward(model, input) } -> std::convertible_to<torch::Tensor>;
      { cp.accumulation() } -> std::convertible_to<std::int64_t>;
    };

} // namespace ftopt::memory
