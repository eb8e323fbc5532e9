#pragma once
/// write_atomically: a file appears whole or not at all. The bytes go to a temporary file in the
/// same folder, which is renamed over the target only after it was written and closed without
/// error; on any failure the temporary is removed and the old file is left as it was.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>

#include <ftopt/error.hpp>

namespace ftopt::detail {

inline void write_atomically(const std::filesystem::path& path, std::string_view who,
                             const std::function<void(std::ostream&)>& write) {
  auto folder = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  check(std::filesystem::is_directory(folder), who, ": ", path.string(), ": folder ",
        folder.string(), " does not exist");
  // Appended piece by piece: g++ 12 -O3 warns falsely (stringop-overflow) on "." + string&&.
  std::string name(".");
  name += path.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  const auto temporary = folder / name;
  try {
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      check(out.good(), who, ": cannot write ", temporary.string());
      write(out);
      out.flush();
      check(out.good(), who, ": writing ", temporary.string(), " failed (disk full?)");
    }
    std::error_code ec;
    std::filesystem::rename(temporary, path, ec);
    check(!ec, who, ": cannot move ", temporary.string(), " to ", path.string(), ": ", ec.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

} // namespace ftopt::detail
