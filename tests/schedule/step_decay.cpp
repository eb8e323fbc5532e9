// Tests for include/ftopt/schedule/step_decay.hpp against torch.optim.lr_scheduler.StepLR's
// closed form, base_lr * gamma ** (step // step_size).
#include <catch2/catch.hpp>

#include <ftopt/schedule/step_decay.hpp>

#include "../support.hpp"

using ftopt::schedule::StepDecay;

TEST_CASE("StepDecay follows torch's StepLR", "[schedule]") {
  const StepDecay s{.step_size = 3, .gamma = 0.5};
  CHECK(s.factor(0) == 1.0);
  CHECK(s.factor(2) == 1.0);
  CHECK(s.factor(3) == 0.5);
  CHECK(s.factor(8) == 0.25);
  CHECK(s.factor(9) == 0.125);
}

TEST_CASE("StepDecay rejects bad settings with the value", "[schedule][errors]") {
  CHECK_THAT(ftopt::test::message_of([] { StepDecay{.step_size = 0}.validate(); }),
             Catch::Contains("schedule::StepDecay: step_size must be >= 1, got 0"));
  CHECK_THAT(ftopt::test::message_of([] { StepDecay{.gamma = -0.1}.validate(); }),
             Catch::Contains("schedule::StepDecay: gamma must be finite and > 0, got -0.1"));
}
