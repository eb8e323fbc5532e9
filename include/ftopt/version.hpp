#pragma once
/// ftopt's version, the one place it is written (CMakeLists.txt reads it from here for the
/// package version). Checkpoints record it as the writer.

namespace ftopt {

inline constexpr const char* version = "0.2.0";

} // namespace ftopt
