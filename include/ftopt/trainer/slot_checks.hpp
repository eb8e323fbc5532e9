#pragma once
/// One consteval check per Trainer slot. Each stops at its first failure, so a wrong argument
/// gives one sentence, not a cascade: another axis's policy in the slot, a type that is no
/// policy, a policy missing hooks of its axis's concept, or a Memory policy missing a hook of
/// the optimizer-in-backward protocol it declares.

#include <ftopt/axis.hpp>
#include <ftopt/detail/dependent_false.hpp>
#include <ftopt/memory/concept.hpp>
#include <ftopt/parallel/concept.hpp>
#include <ftopt/peft/concept.hpp>
#include <ftopt/precision/concept.hpp>
#include <ftopt/quant/concept.hpp>
#include <ftopt/rules.hpp>

// The messages differ only in names, and static_assert takes only string literals (before
// C++26), so the five checks are stamped from one macro.
#define FTOPT_DETAIL_SLOT_CHECK(Axis, ns, ordinal, baseline)                                    \
  template <class P>                                                                            \
  consteval bool check_##ns##_slot() {                                                          \
    if constexpr (AnyPolicy<P> && !PolicyOf<P, axis::Axis>)                                     \
      static_assert(dependent_false<P>,                                                         \
                    "ftopt::Trainer<Precision, Peft, Memory, Parallel, Quant>: the " #Axis     \
                    " slot (" ordinal ") holds a policy of another axis; put a " #ns           \
                    ":: policy there (e.g. " #ns "::" #baseline ") and mind the order.");      \
    else if constexpr (!AnyPolicy<P>)                                                           \
      static_assert(dependent_false<P>,                                                         \
                    "ftopt::Trainer: the " #Axis " argument is not a policy: a " #Axis        \
                    " policy declares `using axis = ftopt::axis::" #Axis ";` (e.g. " #ns      \
                    "::" #baseline ").");                                                       \
    else if constexpr (!ns::Policy<P>)                                                          \
      static_assert(dependent_false<P>,                                                         \
                    "ftopt::Trainer: the " #Axis " policy does not model ftopt::" #ns          \
                    "::Policy: a hook is missing or has the wrong signature; the list is in "  \
                    "include/ftopt/" #ns "/concept.hpp.");                                      \
    return true;                                                                                \
  }

namespace ftopt::detail {
FTOPT_DETAIL_SLOT_CHECK(Precision, precision, "1st", Fp32)
FTOPT_DETAIL_SLOT_CHECK(Peft, peft, "2nd", Full)
FTOPT_DETAIL_SLOT_CHECK(Memory, memory, "3rd", None)
FTOPT_DETAIL_SLOT_CHECK(Parallel, parallel, "4th", Single)
FTOPT_DETAIL_SLOT_CHECK(Quant, quant, "5th", None)

/// The Parallel slot's check, after one for a policy named where only its declaration is seen:
/// parallel::Ddp, whose header <ftopt.hpp> leaves out (it compiles c10d's process groups and
/// Reducer into the TU).
template <class P>
consteval bool check_parallel_slot_defined() {
  if constexpr (!requires { sizeof(P); })
    static_assert(dependent_false<P>,
                  "ftopt::Trainer: the Parallel policy is declared but not defined in this source file: "
                  "parallel::Ddp needs #include <ftopt/parallel/ddp.hpp> (<ftopt.hpp> leaves DDP's c10d "
                  "headers out; the backend headers <ftopt/parallel/gloo.hpp> and nccl.hpp include it).");
  else
    return check_parallel_slot<P>();
  return true;
}

/// The Memory slot's optional protocol: a policy that declares steps_in_backward has the three
/// hooks the Trainer steps the optimizer in the backward with (memory::StepsInBackward); the
/// first one missing is named.
template <class P>
consteval bool check_memory_protocol() {
  if constexpr (rules::steps_in_backward<P>) {
    if constexpr (!requires(P& p, const std::vector<torch::Tensor>& trainable) { p.attach(trainable); })
      static_assert(dependent_false<P>,
                    "ftopt::Trainer: the Memory policy declares steps_in_backward but has no "
                    "attach(const std::vector<torch::Tensor>& trainable); a policy that steps the optimizer in "
                    "the backward has attach, arm and disarm (include/ftopt/memory/concept.hpp).");
    else if constexpr (!requires(P& p, torch::optim::Optimizer& optimizer) { p.arm(optimizer); })
      static_assert(dependent_false<P>,
                    "ftopt::Trainer: the Memory policy declares steps_in_backward but has no "
                    "arm(torch::optim::Optimizer&); a policy that steps the optimizer in the backward has "
                    "attach, arm and disarm (include/ftopt/memory/concept.hpp).");
    else if constexpr (!memory::StepsInBackward<P>)
      static_assert(dependent_false<P>,
                    "ftopt::Trainer: the Memory policy declares steps_in_backward but has no "
                    "disarm() -> std::int64_t; a policy that steps the optimizer in the backward has attach, "
                    "arm and disarm (include/ftopt/memory/concept.hpp).");
  }
  return true;
}

/// The five slots' checks, in slot order.
template <class Precision, class Peft, class Memory, class Parallel, class Quant>
consteval bool check_slots() {
  return check_precision_slot<Precision>() && check_peft_slot<Peft>() && check_memory_slot<Memory>() &&
         check_memory_protocol<Memory>() &&
         check_parallel_slot_defined<Parallel>() && check_quant_slot<Quant>();
}
} // namespace ftopt::detail

#undef FTOPT_DETAIL_SLOT_CHECK
