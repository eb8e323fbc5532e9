// Tests for include/ftopt/detail/atomic_file.hpp: a write that fails leaves the old file whole and
// no temporary behind.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

#include <torch/torch.h>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/weights/files.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("A write that fails leaves the old file whole and no temporary behind", "[weights][errors]") {
  const test::ScratchDir scratch("atomic-file");
  const auto& dir = scratch.path;
  const auto path = dir / "weights.pt";
  { std::ofstream(path) << "the last good file"; }
  CHECK_THROWS(ftopt::detail::write_atomically(path, "test", [](std::ostream& out) {
    out << "half of a new fi";
    throw std::runtime_error("interrupted");
  }));
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text == "the last good file");
  CHECK(std::distance(std::filesystem::directory_iterator(dir), {}) == 1);
  CHECK_THAT(test::message_of([&] { weights::save_file(dir / "no" / "such" / "folder.pt", weights::StateDict{}, weights::Format::Torch); }),
             Contains("does not exist"));
}
