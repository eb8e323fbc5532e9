#pragma once
/// ftopt::Error: what ftopt throws for bad input (an option value, a file, a key). Its message
/// names the value and where it came from, e.g. "read_idx: /data/x.idx: wrong magic 0x00000903".

#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace ftopt {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

namespace detail {
/// fail's body, instantiated once per list of decayed part types (every string literal a
/// const char*), not once per list of literal lengths (some 300 checks in ftopt's headers: about
/// 0.5 s less for a translation unit that includes <ftopt.hpp>, docs/build.md).
template <class... Parts>
[[noreturn]] void throw_error(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
}
} // namespace detail

/// Throws ftopt::Error whose message is the parts streamed one after another:
///   ftopt::fail("finetune: --budget must be >= 0, got ", budget);
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  detail::throw_error<std::decay_t<const Parts&>...>(parts...);
}

/// fail(parts...) unless `ok`; the parts are only formatted on failure:
///   ftopt::check(r > 0, "Lora: r must be > 0, got ", r);
template <class... Parts>
void check(bool ok, const Parts&... parts) {
  if (!ok) [[unlikely]] detail::throw_error<std::decay_t<const Parts&>...>(parts...);
}

namespace detail {
// ftopt's own headers call them as detail::check / detail::fail.
using ftopt::check;
using ftopt::fail;
} // namespace detail
} // namespace ftopt
