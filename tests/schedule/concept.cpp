// Tests for include/ftopt/schedule/concept.hpp: the laws every schedule keeps, run over each
// model, and schedule::Schedule, which holds any of them for TrainerOptions.
#include <catch2/catch.hpp>

#include <cmath>
#include <concepts>
#include <vector>

#include <ftopt/schedule/constant_with_warmup.hpp>
#include <ftopt/schedule/step_decay.hpp>
#include <ftopt/schedule/warmup_cosine.hpp>
#include <ftopt/schedule/warmup_linear.hpp>

#include "../support.hpp"

using namespace ftopt::schedule;

namespace {

/// Each model with a warmup of 4 over 40 steps, where it has them.
template <class S>
S schedule_with_warmup() {
  if constexpr (std::same_as<S, StepDecay>) return StepDecay{.step_size = 7, .gamma = 0.5};
  else if constexpr (SpansFit<S>) return S{.warmup_steps = 4, .total_steps = 40};
  else return S{.warmup_steps = 4};
}

} // namespace

TEMPLATE_TEST_CASE("Every schedule keeps the schedule laws", "[schedule][laws]", WarmupCosine, WarmupLinear,
                   ConstantWithWarmup, StepDecay) {
  STATIC_REQUIRE(Hook<TestType>);
  const TestType s = schedule_with_warmup<TestType>();
  CHECK_NOTHROW(s.validate());
  const Schedule held = s;
  std::vector<double> in_order;
  for (std::int64_t k = 0; k <= 45; ++k) in_order.push_back(s.factor(k));
  for (std::int64_t k = 45; k >= 0; --k) {
    CAPTURE(k);
    const auto i = static_cast<std::size_t>(k);
    CHECK(in_order[i] >= 0.0);
    // A function of the step alone: asked in reverse order, and of a fresh copy, the same value.
    CHECK(s.factor(k) == in_order[i]);
    CHECK(schedule_with_warmup<TestType>().factor(k) == in_order[i]);
    CHECK(held.factor(k) == in_order[i]);  // Schedule forwards to the model
  }
  if constexpr (requires { s.warmup_steps; }) {
    CHECK(s.factor(0) == 0.0);  // Hugging Face's warmup starts at lr 0
    CHECK(s.factor(4) == Approx(1.0));
  }
  CHECK(held.get<TestType>() != nullptr);
}

TEST_CASE("Schedule holds any hook, is empty for none, and fills in the fit's length", "[schedule]") {
  const Schedule none;
  CHECK_FALSE(none);
  CHECK(none.factor(17) == 1.0);
  CHECK_FALSE(none.needs_total_steps());

  const Schedule derived = WarmupLinear{.warmup_steps = 2};
  CHECK(derived.needs_total_steps());
  const Schedule spanning = derived.spanning(12);
  CHECK_FALSE(spanning.needs_total_steps());
  REQUIRE(spanning.get<WarmupLinear>() != nullptr);
  CHECK(spanning.get<WarmupLinear>()->total_steps == 12);
  CHECK(spanning.get<WarmupCosine>() == nullptr);
  CHECK(derived.get<WarmupLinear>()->total_steps == 0);  // the original is unchanged

  const Schedule fixed = WarmupCosine{.warmup_steps = 2, .total_steps = 30};
  CHECK_FALSE(fixed.needs_total_steps());
  const Schedule unsized = ConstantWithWarmup{.warmup_steps = 3};
  CHECK_FALSE(unsized.needs_total_steps());

  // A schedule of the user's own: anything with factor(step).
  struct Halving {
    double factor(std::int64_t step) const { return std::pow(0.5, static_cast<double>(step)); }
  };
  const Schedule own = Halving{};
  CHECK(own.factor(3) == 0.125);
  CHECK_NOTHROW(own.validate());
}

TEST_CASE("Schedule validates the schedule it holds", "[schedule][errors]") {
  const Schedule bad = StepDecay{.step_size = 0};
  CHECK_THAT(ftopt::test::message_of([&] { bad.validate(); }),
             Catch::Contains("schedule::StepDecay: step_size must be >= 1, got 0"));
}
