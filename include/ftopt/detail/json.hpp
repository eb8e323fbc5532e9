#pragma once
/// What the file functions need of JSON before a caller includes <ftopt/json.hpp>: the names
/// (nlohmann's json_fwd.hpp) and the check that turns a missing include into one sentence.

#include <nlohmann/json_fwd.hpp>

namespace ftopt::detail {

/// `static_assert(detail::JsonIncluded<Json>::value);` opens every file function that uses a
/// Json itself (those that only pass their Json on reach one of these): it fires in the caller's
/// TU when nlohmann::json is declared there but not defined.
template <class Json>
struct JsonIncluded {
  static_assert(requires { sizeof(Json); },
                "ftopt's file functions read and write JSON: include <ftopt/json.hpp> in this source file "
                "(<ftopt.hpp> declares nlohmann::json only, to keep its compile time)");
  static constexpr bool value = true;
};

} // namespace ftopt::detail
