#pragma once
/// dependent_false<T...>: false, but only known when a template is instantiated, so a
/// static_assert on it fires for the failing instantiation alone (Boost.Hana's trick).

namespace ftopt::detail {
template <class...>
inline constexpr bool dependent_false = false;
} // namespace ftopt::detail
