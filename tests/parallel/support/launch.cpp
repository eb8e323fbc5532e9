// Tests for include/ftopt/parallel/support/launch.hpp: each rank gets torchrun's variables and its
// own log, and the first failure is reported.
// <torch/torch.h> before Catch, as in the other parallel tests.
#include <chrono>
#include <csignal>
#include <sstream>
#include <string>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <ftopt/parallel/support/launch.hpp>

#include "../../support.hpp"
#include "../ranks.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using ftopt::test::ScratchDir;
using ddp_test::read_text;

TEST_CASE("launch gives each rank torchrun's variables, its own log, and reports the first failure",
          "[parallel][launch]") {
  ScratchDir dir("launch");
  std::ostringstream log;
  SECTION("all succeed") {
    auto result = parallel::launch({.nproc = 3, .log_dir = dir.path, .log = &log},
                                   {"sh", "-c", "echo $RANK/$WORLD_SIZE/$LOCAL_RANK@$MASTER_ADDR:$MASTER_PORT"});
    CHECK(result.code() == 0);
    for (int r = 0; r < 3; ++r) {
      const auto text = read_text(dir.path / ("rank" + std::to_string(r) + ".log"));
      CHECK_THAT(text, Contains(std::to_string(r) + "/3/" + std::to_string(r) + "@127.0.0.1:"));
    }
  }
  SECTION("one fails: its status, and the others are stopped after the grace period") {
    const auto start = std::chrono::steady_clock::now();
    auto result = parallel::launch({.nproc = 2, .log_dir = dir.path, .grace = std::chrono::milliseconds(300), .log = &log},
                                   {"sh", "-c", "if [ $RANK = 1 ]; then exit 7; fi; exec sleep 60"});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(result.first_failed == 1);
    CHECK(result.code() == 7);
    CHECK(result.status[0] == 128 + SIGTERM);
    CHECK(seconds < 10);
    CHECK_THAT(log.str(), Contains("rank 1 exited with status 7"));
  }
  SECTION("a program that does not exist") {
    CHECK_THAT(test::message_of([&] { parallel::launch({.nproc = 2, .log = &log}, {"/nonexistent/program"}); }),
               Contains("cannot start '/nonexistent/program' for rank 0"));
  }
}
