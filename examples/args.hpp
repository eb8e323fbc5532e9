#pragma once
// The examples' command lines: `--flag value` pairs read into the variables a table names, with
// errors that name the program, the flag and the value. (The main job, apps/finetune, has a
// full CLI11 interface; these stay small on purpose.)
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>

#include <ftopt/error.hpp>

namespace examples {

/// One option: its flag and where its value goes (a non-negative integer or any text).
struct Option {
  std::string_view flag;
  std::variant<std::int64_t*, std::string*> into;
};

/// Reads `--flag value` pairs into `options`. An unknown flag (the known ones are listed), a
/// flag without a value, or an integer option given something else is an error.
inline void parse(std::string_view program, int argc, char** argv, std::initializer_list<Option> options) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    ftopt::check(i + 1 < argc, program, ": ", flag, " needs a value");
    const char* value = argv[++i];
    const Option* option = nullptr;
    for (const auto& o : options)
      if (o.flag == flag) option = &o;
    if (option == nullptr) {
      std::ostringstream known;
      for (const auto& o : options) known << (&o == options.begin() ? "" : ", ") << o.flag;
      ftopt::fail(program, ": unknown option ", flag, " (known: ", known.str(), ")");
    }
    if (auto* text = std::get_if<std::string*>(&option->into)) {
      **text = value;
      continue;
    }
    char* end = nullptr;
    const long long n = std::strtoll(value, &end, 10);
    ftopt::check(end != value && *end == '\0' && n >= 0, program, ": ", flag, " needs a non-negative integer, got '",
                 value, "'");
    *std::get<std::int64_t*>(option->into) = n;
  }
}

} // namespace examples
