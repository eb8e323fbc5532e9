// Tests for include/ftopt/parallel/support/environment.hpp: torchrun's variables read, a bad one
// named.
// <torch/torch.h> before Catch, as in the other parallel tests.
#include <string>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <ftopt/parallel/support/environment.hpp>

#include "../../support.hpp"
#include "../ranks.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using ddp_test::ScopedEnv;

TEST_CASE("Environment reads torchrun's variables and names a bad one", "[parallel]") {
  ScopedEnv master("MASTER_ADDR", "10.0.0.7"), port("MASTER_PORT", "29511"), rank("RANK", "1"),
      world("WORLD_SIZE", "4"), local("LOCAL_RANK", "1");
  auto env = parallel::Environment::from_env();
  CHECK(env.master() == "10.0.0.7:29511");
  CHECK(env.rank == 1);
  CHECK(env.world_size == 4);
  CHECK(env.local_rank == 1);

  SECTION("alone: rank 0 of 1") {
    ScopedEnv w("WORLD_SIZE", nullptr), r("RANK", nullptr);
    CHECK(parallel::Environment::from_env().world_size == 1);
  }
  SECTION("not a number") {
    ScopedEnv r("RANK", "one");
    CHECK_THAT(test::message_of([] { parallel::Environment::from_env(); }),
               Contains("RANK='one' is not a non-negative integer"));
  }
  SECTION("rank outside the world") {
    ScopedEnv r("RANK", "4");
    CHECK_THAT(test::message_of([] { parallel::Environment::from_env(); }),
               Contains("RANK=4 is outside 0..3 (WORLD_SIZE=4)"));
  }
  SECTION("a port that is no port") {
    ScopedEnv p("MASTER_PORT", "70000");
    CHECK_THAT(test::message_of([] { parallel::Environment::from_env(); }),
               Contains("MASTER_PORT=70000 is not a port number"));
  }
  SECTION("several processes need the master") {
    ScopedEnv m("MASTER_ADDR", nullptr);
    CHECK_THAT(test::message_of([] { parallel::Environment::from_env(); }),
               Contains("WORLD_SIZE=4 but MASTER_ADDR is not set"));
  }
}
