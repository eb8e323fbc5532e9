// Tests for include/ftopt/schedule/constant_with_warmup.hpp against Hugging Face's
// _get_constant_schedule_with_warmup_lr_lambda: step / max(1, warmup) while warming up, then 1.
#include <catch2/catch.hpp>

#include <ftopt/schedule/constant_with_warmup.hpp>

#include "../support.hpp"

using ftopt::schedule::ConstantWithWarmup;

TEST_CASE("ConstantWithWarmup follows Hugging Face's constant schedule with warmup", "[schedule]") {
  const ConstantWithWarmup s{.warmup_steps = 4};
  CHECK(s.factor(0) == 0.0);
  CHECK(s.factor(1) == Approx(0.25));
  CHECK(s.factor(3) == Approx(0.75));
  CHECK(s.factor(4) == 1.0);
  CHECK(s.factor(1000000) == 1.0);
  CHECK(ConstantWithWarmup{}.factor(0) == 1.0);  // no warmup: the base lr from the first step
  CHECK_THAT(ftopt::test::message_of([] { ConstantWithWarmup{.warmup_steps = -1}.validate(); }),
             Catch::Contains("schedule::ConstantWithWarmup: warmup_steps must be >= 0, got -1"));
}
