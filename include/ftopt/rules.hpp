#pragma once
/// The rules that forbid combinations of policies across axes, checked when a Trainer type is
/// instantiated. Each rule reads properties that policies declare as static members, so the
/// rule holds for every policy with that property, ours or a user's:
///   Precision: `static constexpr c10::ScalarType autocast_dtype`   (absent: no autocast)
///   Precision: `static constexpr bool skips_non_finite_steps`      (absent: false)
///   Peft:      `static constexpr bool needs_prefix_attention`      (absent: false)
///   Peft:      `static constexpr bool quantizes_frozen_base`       (absent: false)
///   Memory:    `static constexpr bool needs_checkpointable_blocks` (absent: false)
///   Memory:    `static constexpr bool steps_in_backward`           (absent: false)
///   Parallel:  `static constexpr bool reduces_gradients`           (absent: false)
///   Quant:     `static constexpr bool fake_quant_training`         (absent: false)
///   Model:     `static constexpr bool has_prefix_attention` in its module class
///   Model:     `static constexpr bool has_checkpointable_blocks` in its module class
/// A broken rule is one static_assert with a sentence naming the axes, the policies' property
/// and the fix; the compiler's note names the policies. broken_rule / broken_model_rule give
/// the same verdict as a value (a short name, or nullptr), for grids that skip combinations.

#include <type_traits>
#include <utility>

#include <c10/core/ScalarType.h>
#include <torch/nn/modules/container/sequential.h>

#include <ftopt/detail/dependent_false.hpp>

namespace ftopt::rules {

/// The precision policy's forward runs under fp16 autocast.
template <class Precision>
inline constexpr bool autocasts_to_fp16 =
    requires { requires Precision::autocast_dtype == c10::ScalarType::Half; };

/// The precision policy skips optimizer steps whose gradients are not finite (loss scaling), so
/// the Trainer does not stop on a non-finite loss.
template <class Precision>
inline constexpr bool skips_non_finite_steps = requires { requires Precision::skips_non_finite_steps; };

/// The peft policy inserts prefixes into attention layers (prefix tuning).
template <class Peft>
inline constexpr bool needs_prefix_attention = requires { requires Peft::needs_prefix_attention; };

/// The model's attention layers take prefixes (models::ViT declares it).
template <class M>
inline constexpr bool has_prefix_attention =
    requires { requires std::remove_cvref_t<decltype(*std::declval<M&>())>::has_prefix_attention; };

/// The peft policy holds the frozen base of the layers it adapts quantized (peft::QLora).
template <class Peft>
inline constexpr bool quantizes_frozen_base = requires { requires Peft::quantizes_frozen_base; };

/// The memory policy recomputes blocks of the model (checkpointing).
template <class Memory>
inline constexpr bool needs_checkpointable_blocks = requires { requires Memory::needs_checkpointable_blocks; };

/// The model is a torch::nn::Sequential (checkpointed in segments).
template <class M>
inline constexpr bool is_sequential = std::is_same_v<std::remove_cvref_t<M>, torch::nn::Sequential>;

/// The model's blocks can be checkpointed: it is a torch::nn::Sequential or declares
/// checkpointable blocks (models::ViT, models::ResNet).
template <class M>
inline constexpr bool has_checkpointable_blocks =
    is_sequential<M> ||
    requires { requires std::remove_cvref_t<decltype(*std::declval<M&>())>::has_checkpointable_blocks; };

/// The memory policy steps the optimizer inside the backward, parameter by parameter
/// (memory::OptimizerInBackward).
template <class Memory>
inline constexpr bool steps_in_backward = requires { requires Memory::steps_in_backward; };

/// The parallel policy reduces gradients across processes once they are complete (parallel::Ddp).
template <class Parallel>
inline constexpr bool reduces_gradients = requires { requires Parallel::reduces_gradients; };

/// The rules by short name: what a grid lists beside a combination it skips (grid/grid.hpp).
namespace rule {
inline constexpr const char* prefix_needs_attention = "prefix tuning needs a model whose attention takes prefixes";
inline constexpr const char* checkpoint_needs_blocks = "checkpointing needs a model with checkpointable blocks";
inline constexpr const char* fake_quant_under_fp16 = "fake-quant training cannot run under fp16 autocast";
inline constexpr const char* step_in_backward_under_loss_scaling =
    "stepping the optimizer in the backward cannot run under loss scaling";
inline constexpr const char* step_in_backward_with_reduction =
    "stepping the optimizer in the backward cannot run with gradients reduced across processes";
inline constexpr const char* fake_quant_over_quantized_base =
    "fake-quant training cannot run over a quantized frozen base";
} // namespace rule

/// The first rule model M breaks with these policies, or nullptr.
template <class Peft, class Memory, class M>
constexpr const char* broken_model_rule() {
  if (needs_prefix_attention<Peft> && !has_prefix_attention<M>) return rule::prefix_needs_attention;
  if (needs_checkpointable_blocks<Memory> && !has_checkpointable_blocks<M>) return rule::checkpoint_needs_blocks;
  return nullptr;
}

/// true, or a static_assert naming the rule the model breaks for these policies.
template <class Peft, class Memory, class M>
consteval bool check_model_for() {
  constexpr const char* broken = broken_model_rule<Peft, Memory, M>();
  if constexpr (broken == rule::prefix_needs_attention)
    static_assert(detail::dependent_false<Peft, M>,
                  "ftopt::Trainer: this Peft policy (prefix tuning) needs a model whose attention "
                  "layers take prefixes (like models::ViT); this model has none: use peft::Lora or "
                  "peft::Adapter with it.");
  if constexpr (broken == rule::checkpoint_needs_blocks)
    static_assert(detail::dependent_false<Memory, M>,
                  "ftopt::Trainer: this Memory policy (checkpointing) needs a torch::nn::Sequential or "
                  "a model with checkpointable blocks (like models::ViT or models::ResNet); for your "
                  "own model, derive its block container from nn::CheckpointableBlocks and declare "
                  "has_checkpointable_blocks.");
  return true;
}

/// The quant policy's training forward runs fake-quantized (QAT).
template <class Quant>
inline constexpr bool trains_fake_quantized = requires { requires Quant::fake_quant_training; };

/// The first rule the combination breaks, or nullptr.
template <class Precision, class Peft, class Memory, class Parallel, class Quant>
constexpr const char* broken_rule() {
  if (autocasts_to_fp16<Precision> && trains_fake_quantized<Quant>) return rule::fake_quant_under_fp16;
  if (steps_in_backward<Memory> && skips_non_finite_steps<Precision>) return rule::step_in_backward_under_loss_scaling;
  if (steps_in_backward<Memory> && reduces_gradients<Parallel>) return rule::step_in_backward_with_reduction;
  if (quantizes_frozen_base<Peft> && trains_fake_quantized<Quant>) return rule::fake_quant_over_quantized_base;
  return nullptr;
}

/// true, or a static_assert naming the first rule the combination breaks.
template <class Precision, class Peft, class Memory, class Parallel, class Quant>
consteval bool check_combination() {
  constexpr const char* broken = broken_rule<Precision, Peft, Memory, Parallel, Quant>();
  if constexpr (broken == rule::fake_quant_under_fp16)
    static_assert(detail::dependent_false<Precision, Quant>,
                  "ftopt::Trainer: fake-quant training (this Quant policy) cannot run under fp16 "
                  "autocast (this Precision policy): ftopt computes fake-quant scales and zero "
                  "points in float32 only; use precision::Bf16Mixed or precision::Fp32 with it.");
  if constexpr (broken == rule::step_in_backward_under_loss_scaling)
    static_assert(detail::dependent_false<Precision, Memory>,
                  "ftopt::Trainer: stepping the optimizer in the backward (this Memory policy) cannot "
                  "run under loss scaling (this Precision policy): a scaled step is skipped when any "
                  "gradient is inf or NaN, which is known only after the whole backward; use "
                  "precision::Bf16Mixed or precision::Fp32 with it.");
  if constexpr (broken == rule::step_in_backward_with_reduction)
    static_assert(detail::dependent_false<Memory, Parallel>,
                  "ftopt::Trainer: stepping the optimizer in the backward (this Memory policy) cannot "
                  "run with a Parallel policy that all-reduces gradients after they are complete "
                  "(DDP): a parameter would step on its local gradient; use parallel::Single with it.");
  if constexpr (broken == rule::fake_quant_over_quantized_base)
    static_assert(detail::dependent_false<Peft, Quant>,
                  "ftopt::Trainer: fake-quant training (this Quant policy) cannot run over a quantized "
                  "frozen base (this Peft policy, peft::QLora): the layers it would fake-quantize already "
                  "hold their weights quantized and frozen; use quant::None while training, and merge "
                  "then quant::DynamicInt8 or quant::StaticInt8 for int8 inference.");
  return true;
}

} // namespace ftopt::rules
