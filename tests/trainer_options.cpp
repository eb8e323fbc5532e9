// Tests for include/ftopt/trainer_options.hpp: bad settings are rejected with the value.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "support.hpp"

using namespace ftopt;
using ftopt::test::message_of;
using Catch::Matchers::Contains;
using ftopt::test::quiet;

TEST_CASE("Bad settings are rejected with the value", "[trainer][errors]") {
  CHECK_THAT(message_of([] { Trainer<>(quiet({.epochs = 0})); }), Contains("epochs must be >= 1, got 0"));
  CHECK_THAT(message_of([] { Trainer<>(quiet({.clip_grad_norm = -1})); }),
             Contains("clip_grad_norm must be >= 0 (0 = off), got -1"));
  CHECK_THAT(message_of([] {
               Trainer<>(quiet({.schedule = schedule::WarmupCosine{.min_lr_ratio = 2}}));
             }),
             Contains("min_lr_ratio must be in [0, 1], got 2"));
}
