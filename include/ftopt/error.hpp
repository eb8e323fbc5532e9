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

namespace detail {

/// Throws ftopt::Error whose message is the parts streamed one after another.
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
}

/// fail(parts...) unless `ok`; the parts are only formatted on failure.
template <class... Parts>
void check(bool ok, const Parts&... parts) {
  if (!ok) [[unlikely]] fail(parts...);
}

} // namespace detail
} // namespace ftopt
