#pragma once
/// ftopt::Error: what ftopt throws for bad input (an option value, a file, a key). Its message
/// names the value and where it came from, e.g. "read_idx: /data/x.idx: wrong magic 0x00000903".

#include <sstream>
#include <stdexcept>

namespace ftopt {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Throws ftopt::Error whose message is the parts streamed one after another:
///   ftopt::fail("finetune: --budget must be >= 0, got ", budget);
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
}

/// fail(parts...) unless `ok`; the parts are only formatted on failure:
///   ftopt::check(r > 0, "Lora: r must be > 0, got ", r);
template <class... Parts>
void check(bool ok, const Parts&... parts) {
  if (!ok) [[unlikely]] fail(parts...);
}

namespace detail {
// ftopt's own headers call them as detail::check / detail::fail.
using ftopt::check;
using ftopt::fail;
} // namespace detail
} // namespace ftopt
