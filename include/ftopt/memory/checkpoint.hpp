#pragma once
/// memory::Checkpoint: gradient (activation) checkpointing. The forward keeps only the inputs of
/// checkpointed blocks; the backward recomputes each block's activations before using them,
/// trading compute (about one more forward) for activation memory.
///
///   // A reference model (models::ViT, models::ResNet): blocks 0, every, 2*every, ... recomputed
///   // (Hugging Face's gradient_checkpointing_enable() with every = 1).
///   ftopt::Trainer<ftopt::precision::Bf16Mixed, ftopt::peft::Lora, ftopt::memory::Checkpoint> t(
///       {}, {}, lora, ftopt::memory::Checkpoint{.every = 1, .accumulate = 4});
///   // A torch::nn::Sequential: PyTorch's checkpoint_sequential(model, segments, input).
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::Checkpoint> s(
///       {}, {}, {}, ftopt::memory::Checkpoint{.segments = 4});
///
/// Exact: dropout masks, autocast and BatchNorm statistics are the ones of the plain forward
/// (nn/checkpoint.hpp says how). Gradient accumulation composes: `.accumulate = N`.
/// A model qualifies if it is a torch::nn::Sequential or its module class declares
/// `static constexpr bool has_checkpointable_blocks = true` and holds nn::CheckpointableBlocks;
/// any other model is a compile error naming this rule (rules.hpp).

#include <cstdint>

#include <torch/nn/modules/container/sequential.h>

#include <ftopt/error.hpp>
#include <ftopt/memory/concept.hpp>
#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/rules.hpp>

namespace ftopt::memory {

struct Checkpoint {
  using axis = ftopt::axis::Memory;
  static constexpr const char* name = "checkpoint";  ///< in grids, tables and flags
  /// The Trainer rejects, at compile time, a model without checkpointable blocks.
  static constexpr bool needs_checkpointable_blocks = true;

  /// Reference models: checkpoint blocks 0, every, 2 * every, ... (1: all of them).
  std::int64_t every = 1;
  /// torch::nn::Sequential models: split into this many runs; all but the last checkpointed.
  std::int64_t segments = 2;
  /// Restore the RNG states for the recompute (PyTorch's preserve_rng_state).
  bool preserve_rng_state = true;
  /// Micro-batches per optimizer step.
  std::int64_t accumulate = 1;

  void validate() const {
    ftopt::detail::check(every >= 1, "memory::Checkpoint: every must be >= 1, got ", every);
    ftopt::detail::check(segments >= 1, "memory::Checkpoint: segments must be >= 1, got ", segments);
    ftopt::detail::check(accumulate >= 1, "memory::Checkpoint: accumulate must be >= 1, got ", accumulate);
  }

  /// Sets every checkpointable block group in the model to this policy's choice.
  template <Model M>
  void prepare(M& model) {
    if constexpr (!rules::is_sequential<M>) {
      std::int64_t found = 0;
      for (const auto& module : ftopt::detail::module_of(model).modules(/*include_self=*/true))
        if (auto* blocks = dynamic_cast<nn::CheckpointableBlocks*>(module.get())) {
          blocks->set_checkpointing({.every = every, .options = {.preserve_rng_state = preserve_rng_state}});
          ++found;
        }
      ftopt::detail::check(found > 0, "memory::Checkpoint: the model declares has_checkpointable_blocks but no module in "
                               "it derives from nn::CheckpointableBlocks");
    }
  }

  template <Model M>
  torch::Tensor forward(M& model, const torch::Tensor& input) {
    if constexpr (rules::is_sequential<M>)
      return nn::checkpoint_sequential(model, segments, input, {.preserve_rng_state = preserve_rng_state});
    else
      return model->forward(input);
  }

  std::int64_t accumulation() const { return accumulate; }
};

static_assert(Policy<Checkpoint>);

} // namespace ftopt::memory
