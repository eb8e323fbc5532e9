// Tests for include/ftopt/schedule/warmup_cosine.hpp against Hugging Face's formulas
// (transformers.optimization: _get_cosine_schedule_with_warmup_lr_lambda, and the min-lr
// variant): values worked out by hand below.
#include <catch2/catch.hpp>

#include <ftopt/schedule/warmup_cosine.hpp>

#include "../support.hpp"

using ftopt::schedule::WarmupCosine;

TEST_CASE("WarmupCosine follows Hugging Face's cosine-with-warmup", "[schedule]") {
  WarmupCosine s{.warmup_steps = 10, .total_steps = 110};
  CHECK(s.factor(0) == 0.0);             // 0 / 10
  CHECK(s.factor(5) == Approx(0.5));     // 5 / 10
  CHECK(s.factor(10) == Approx(1.0));    // progress 0: 0.5 (1 + cos 0)
  CHECK(s.factor(35) == Approx(0.5 * (1 + std::cos(M_PI * 0.25))));  // progress 0.25: 0.853553
  CHECK(s.factor(60) == Approx(0.5));    // progress 0.5: 0.5 (1 + cos(pi/2))
  CHECK(s.factor(110) == Approx(0.0).margin(1e-12));  // progress 1
  WarmupCosine floor{.warmup_steps = 10, .total_steps = 110, .min_lr_ratio = 0.1};
  CHECK(floor.factor(5) == Approx(0.5));  // the floor applies after warmup only
  CHECK(floor.factor(60) == Approx(0.1 + 0.9 * 0.5));
  CHECK(floor.factor(110) == Approx(0.1));
  WarmupCosine none{.total_steps = 4};
  CHECK(none.factor(0) == Approx(1.0));  // no warmup: full lr at once
}

TEST_CASE("WarmupCosine rejects bad settings with the value", "[schedule][errors]") {
  CHECK_THAT(ftopt::test::message_of([] { WarmupCosine{.warmup_steps = -1}.validate(); }),
             Catch::Contains("warmup_steps must be >= 0, got -1"));
  CHECK_THAT(ftopt::test::message_of([] { WarmupCosine{.total_steps = -5}.validate(); }),
             Catch::Contains("total_steps must be >= 0, got -5"));
}
