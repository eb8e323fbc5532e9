#pragma once
/// The five policy axes of ftopt::Trainer<Precision, Peft, Memory, Parallel, Quant>.
///
/// Every policy names its axis with a member alias, `using axis = ftopt::axis::Peft;`, so a
/// policy given in the wrong slot is reported as exactly that instead of as a missing member.

#include <concepts>

namespace ftopt::axis {

struct Precision {};
struct Peft {};
struct Memory {};
struct Parallel {};
struct Quant {};

} // namespace ftopt::axis

namespace ftopt {

/// A type that declares itself a policy of some axis.
template <class P>
concept AnyPolicy = requires { typename P::axis; };

/// A type that declares itself a policy of axis `Axis`.
template <class P, class Axis>
concept PolicyOf = AnyPolicy<P> && std::same_as<typename P::axis, Axis>;

namespace detail {

/// Calls p.validate() where the policy has one: policies whose settings are aggregates check
/// them here, when the Trainer takes them, and throw ftopt::Error naming the bad value.
template <class P>
void validate_policy(const P& p) {
  if constexpr (requires { p.validate(); }) p.validate();
}

/// validate_policy for each, in order.
template <class... Ps>
void validate_policies(const Ps&... ps) {
  (validate_policy(ps), ...);
}

} // namespace detail
} // namespace ftopt
