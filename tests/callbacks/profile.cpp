// Tests for include/ftopt/callbacks/profile.hpp: a Chrome trace with ftopt's step phases and
// ATen's ops.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <string>

#include <torch/torch.h>

#include <ftopt/callbacks/profile.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("callbacks::Profile: a Chrome trace with ftopt's step phases and ATen's ops", "[grid][profile]") {
  test::ScratchDir dir("profile");
  auto model = test::small_mlp(6);
  auto batches = test::random_batches(6, 16, 7);
  Trainer<> trainer(test::quiet());
  auto& params = trainer.prepare(model);
  torch::optim::SGD optimizer(params, 0.1);
  callbacks::Profile profile({.path = dir.path / "trace.json", .wait = 1, .steps = 2});
  trainer.fit(model, optimizer, batches, profile);
  REQUIRE(profile.written());
  std::ifstream in(dir.path / "trace.json");
  const std::string trace((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(trace.find('[') < trace.find('{'));  // a JSON array of events, as chrome://tracing reads
  for (const char* name : {"ftopt::data", "ftopt::forward", "ftopt::backward", "ftopt::optimizer_step", "aten::addmm"})
    CHECK_THAT(trace, Contains(name));
  // Two steps recorded: two forwards.
  std::size_t forwards = 0;
  for (auto at = trace.find("\"ftopt::forward\""); at != std::string::npos; at = trace.find("\"ftopt::forward\"", at + 1))
    ++forwards;
  CHECK(forwards == 2);
  CHECK_THAT(test::message_of([] { callbacks::Profile({.steps = 0}); }),
             Contains("callbacks::Profile: wait must be >= 0 and steps >= 1, got wait 1, steps 0"));
}
