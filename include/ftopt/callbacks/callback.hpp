#pragma once
/// Callbacks: any object with some of these hooks, all optional (ensmallen's callback style):
///   on_fit_begin(const FitState&)          on_epoch_begin(const FitState&)
///   on_step_end(const FitState&)           on_epoch_end(const FitState&, const EpochStats&)
///   on_fit_end(const FitSummary&)
/// A hook returns void, or ftopt::Signal; Signal::Stop from on_step_end or on_epoch_end ends
/// fit after that step or epoch. Callbacks are passed to fit() as a variadic tail:
///
///   struct StopAt90 {
///     ftopt::Signal on_epoch_end(const ftopt::FitState&, const ftopt::EpochStats& e) {
///       return e.accuracy.value_or(0) > 0.9 ? ftopt::Signal::Stop : ftopt::Signal::Continue;
///     }
///   };
///   trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{}, StopAt90{});

#include <concepts>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ftopt/state.hpp>

namespace ftopt {

/// What a hook may return to steer fit.
enum class Signal { Continue, Stop };

namespace detail {

/// Calls `hook(callback, args...)` if the callback has that hook; true if it asked to stop.
template <class Callback, class Hook, class... Args>
bool call_hook(Callback& callback, Hook hook, const Args&... args) {
  if constexpr (std::is_invocable_v<Hook, Callback&, const Args&...>) {
    using Result = std::invoke_result_t<Hook, Callback&, const Args&...>;
    static_assert(std::is_void_v<Result> || std::same_as<Result, Signal>,
                  "ftopt callbacks: a hook returns void or ftopt::Signal.");
    if constexpr (std::same_as<Result, Signal>) return hook(callback, args...) == Signal::Stop;
    else hook(callback, args...);
  }
  return false;
}

/// Calls the hook on every callback (all of them, even after one asked to stop).
template <class Hook, class... Args, class... Callbacks>
bool call_hooks(std::tuple<Callbacks...>& callbacks, Hook hook, const Args&... args) {
  return std::apply(
      [&](auto&... each) { return (false | ... | call_hook(each, hook, args...)); }, callbacks);
}

// The hooks, as function objects that exist only where the callback defines them.
inline constexpr auto on_fit_begin = [](auto& c, const auto&... a) -> decltype(c.on_fit_begin(a...)) {
  return c.on_fit_begin(a...);
};
inline constexpr auto on_epoch_begin = [](auto& c, const auto&... a) -> decltype(c.on_epoch_begin(a...)) {
  return c.on_epoch_begin(a...);
};
inline constexpr auto on_step_end = [](auto& c, const auto&... a) -> decltype(c.on_step_end(a...)) {
  return c.on_step_end(a...);
};
inline constexpr auto on_epoch_end = [](auto& c, const auto&... a) -> decltype(c.on_epoch_end(a...)) {
  return c.on_epoch_end(a...);
};
inline constexpr auto on_fit_end = [](auto& c, const auto&... a) -> decltype(c.on_fit_end(a...)) {
  return c.on_fit_end(a...);
};

} // namespace detail
} // namespace ftopt
