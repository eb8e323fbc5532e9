#pragma once
/// What the file functions need of JSON before a caller includes <ftopt/json.hpp>: the names
/// (nlohmann's json_fwd.hpp) and the check that turns a missing include into one sentence.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>

#include <nlohmann/json_fwd.hpp>

#include <ftopt/error.hpp>

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

/// The JSON value in the file at `path`; a missing file, or one that is not JSON, is an error
/// that starts with `where`.
template <class Json>
Json read_json_file(const std::filesystem::path& path, const std::string& where) {
  static_assert(JsonIncluded<Json>::value);
  check(std::filesystem::is_regular_file(path), where, ": no such file");
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  try {
    return Json::parse(bytes.str());
  } catch (const typename Json::exception& e) {
    fail(where, ": not valid JSON (", e.what(), ")");
  }
}

/// object[key] as a T, or `fallback` where the key is absent or null; a value of another JSON
/// type is an error that starts with `where` and names the key and the value (config.json fields).
template <class T, class Json>
T json_value_or(const Json& object, const char* key, T fallback, const std::string& where) {
  if (!object.contains(key) || object[key].is_null()) return fallback;
  try {
    return object[key].template get<T>();
  } catch (const typename Json::exception&) {
    fail(where, ": ", key, " is ", object[key].dump(), ", not ",
         std::is_same_v<T, bool>             ? "a bool"
         : std::is_floating_point_v<T>       ? "a number"
         : std::is_integral_v<T>             ? "an integer"
                                             : "a string");
  }
}

} // namespace ftopt::detail
