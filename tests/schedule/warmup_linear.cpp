// Tests for include/ftopt/schedule/warmup_linear.hpp against Hugging Face's
// _get_linear_schedule_with_warmup_lr_lambda (transformers.optimization): values by hand below.
// peer.schedule compares it with the real transformers through the Trainer.
#include <catch2/catch.hpp>

#include <ftopt/schedule/warmup_linear.hpp>

#include "../support.hpp"

using ftopt::schedule::WarmupLinear;

TEST_CASE("WarmupLinear follows Hugging Face's linear schedule with warmup", "[schedule]") {
  const WarmupLinear s{.warmup_steps = 10, .total_steps = 110};
  CHECK(s.factor(0) == 0.0);            // 0 / 10
  CHECK(s.factor(5) == Approx(0.5));    // 5 / 10
  CHECK(s.factor(10) == Approx(1.0));   // (110 - 10) / 100
  CHECK(s.factor(35) == Approx(0.75));  // (110 - 35) / 100
  CHECK(s.factor(110) == 0.0);
  CHECK(s.factor(200) == 0.0);          // clamped at 0 past the end
  CHECK(WarmupLinear{.total_steps = 4}.factor(0) == Approx(1.0));
}

TEST_CASE("WarmupLinear rejects bad settings with the value", "[schedule][errors]") {
  CHECK_THAT(ftopt::test::message_of([] { WarmupLinear{.warmup_steps = -2}.validate(); }),
             Catch::Contains("schedule::WarmupLinear: warmup_steps must be >= 0, got -2"));
  CHECK_THAT(ftopt::test::message_of([] { WarmupLinear{.total_steps = -1}.validate(); }),
             Catch::Contains("schedule::WarmupLinear: total_steps must be >= 0, got -1"));
}
