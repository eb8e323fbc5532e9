#pragma once
// Reading the examples' command-line values, with errors that name the flag and the value.
#include <cstdlib>
#include <string_view>

#include <ftopt/error.hpp>

namespace examples {

/// A non-negative integer, or an error naming `flag` and `value`.
inline std::int64_t count(std::string_view program, std::string_view flag, const char* value) {
  char* end = nullptr;
  const long long n = std::strtoll(value, &end, 10);
  ftopt::check(end != value && *end == '\0' && n >= 0, program, ": ", flag,
                       " needs a non-negative integer, got '", value, "'");
  return n;
}

/// A positive number, or an error naming `flag` and `value`.
inline double positive(std::string_view program, std::string_view flag, const char* value) {
  char* end = nullptr;
  const double x = std::strtod(value, &end);
  ftopt::check(end != value && *end == '\0' && x > 0, program, ": ", flag,
                       " needs a positive number, got '", value, "'");
  return x;
}

/// A number in [0, 1), or an error naming `flag` and `value`.
inline double fraction(std::string_view program, std::string_view flag, const char* value) {
  char* end = nullptr;
  const double x = std::strtod(value, &end);
  ftopt::check(end != value && *end == '\0' && x >= 0 && x < 1, program, ": ", flag,
                       " needs a number in [0, 1), got '", value, "'");
  return x;
}

/// Reads `--flag value` pairs: `set(flag, value)` stores a value and returns false for a flag
/// it does not know, which is an error listing the `known` ones.
template <class Set>
void parse_pairs(std::string_view program, int argc, char** argv, std::string_view known, Set set) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    ftopt::check(i + 1 < argc, program, ": ", flag, " needs a value");
    const char* value = argv[++i];
    if (!set(flag, value)) ftopt::fail(program, ": unknown option ", flag, " (known: ", known, ")");
  }
}

} // namespace examples
