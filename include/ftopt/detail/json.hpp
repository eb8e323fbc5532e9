#pragma once
/// What the file functions need of JSON before a caller includes <ftopt/json.hpp>: the names
/// (nlohmann's json_fwd.hpp) and the check that turns a missing include into one sentence.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

} // namespace ftopt::detail
