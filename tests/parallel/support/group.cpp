// Tests for include/ftopt/parallel/support/group.hpp: a backend the program did not include, or
// this build lacks, is named with its header.
// <torch/torch.h> before Catch, as in the other parallel tests.
#include <string>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <ftopt/detail/scope_exit.hpp>
#include <ftopt/parallel/ddp.hpp>
#include <ftopt/trainer.hpp>

#include "../../support.hpp"
#include "../ddp_data.hpp"
#include "../ranks.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using ddp_test::have_gloo;

TEST_CASE("Ddp: a backend the program did not include, or this build lacks, is named with its header",
          "[parallel][ddp][errors]") {
  if (!have_gloo()) return;
  // This program includes <ftopt/parallel/gloo.hpp> (ranks.hpp); take its registration away for
  // the case, as in a program that does not, and put it back after.
  auto& entry = parallel::detail::backend_entry(parallel::Backend::Gloo);
  const parallel::detail::BackendEntry registered = entry;
  const ftopt::detail::ScopeExit restore([&] { entry = registered; });
  auto model = test::ddp::model(1);
  auto prepare = [&] {
    Trainer<precision::Fp32, peft::Full, memory::None, parallel::Ddp> trainer(
        test::ddp::trainer_options(1), {}, {}, {}, parallel::Ddp({.environment = parallel::Environment{}}));
    trainer.prepare(model);
  };
  SECTION("no header registered it") {
    entry = {};
    CHECK_FALSE(parallel::has_backend(parallel::Backend::Gloo));
    CHECK_THAT(test::message_of(prepare),
               Contains("the gloo backend is not in this program: include <ftopt/parallel/gloo.hpp>"));
  }
  SECTION("the header says this build has none") {
    entry = {nullptr, "Gloo's headers were not found"};
    CHECK_THAT(test::message_of(prepare),
               Contains("this build has no gloo backend (Gloo's headers were not found)"));
  }
}
