#pragma once
/// detail::ScopeExit: runs a callable when the scope ends, normally or by an exception.
///
///   const ftopt::detail::ScopeExit restore([&] { flag = false; });

#include <utility>

namespace ftopt::detail {

template <class F>
class ScopeExit {
public:
  explicit ScopeExit(F f) : f_(std::move(f)) {}
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;
  ~ScopeExit() { f_(); }

private:
  F f_;
};

} // namespace ftopt::detail
