// Tests for include/ftopt/version.hpp: the version is MAJOR.MINOR.PATCH (CMakeLists.txt reads
// it from the header with that pattern), and it is never behind the newest release CHANGELOG.md
// names ("## [X.Y.Z] - date").
#include <catch2/catch.hpp>

#include <array>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <ftopt/version.hpp>

#include "support.hpp"

namespace {

std::array<int, 3> parts(const std::smatch& m) { return {std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])}; }

} // namespace

TEST_CASE("ftopt::version is MAJOR.MINOR.PATCH, at or after CHANGELOG.md's newest release", "[version]") {
  const std::string version = ftopt::version;
  std::smatch own;
  REQUIRE(std::regex_match(version, own, std::regex(R"(([0-9]+)\.([0-9]+)\.([0-9]+))")));

  // tests/fixtures/../../CHANGELOG.md: the first release heading is the newest.
  std::ifstream changelog(ftopt::test::fixture("..") / ".." / "CHANGELOG.md");
  REQUIRE(changelog);
  const std::regex release(R"(^## \[([0-9]+)\.([0-9]+)\.([0-9]+)\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$)");
  std::smatch newest;
  std::string line;
  bool found = false;
  while (!found && std::getline(changelog, line)) found = std::regex_match(line, newest, release);
  REQUIRE(found);
  INFO("version.hpp: " << version << ", CHANGELOG.md: " << line);
  CHECK(parts(own) >= parts(newest));
}
