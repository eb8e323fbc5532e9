// Tests for include/ftopt/grid/run.hpp: grid::run and autotune on a small model (baseline first,
// errors reported, the budget, the order of trial).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/grid/run.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("grid::run and autotune on a small model: baseline first, errors reported, the budget", "[grid]") {
  using G = grid::Grid<grid::Axis<precision::Fp32>, grid::Axis<peft::Full, peft::Lora>, grid::Axis<memory::None>,
                       grid::Axis<parallel::Single>, grid::Axis<quant::None, quant::DynamicInt8, quant::Qat>>;
  auto train = test::random_batches(4, 32, 3);
  auto held_out = test::random_batches(2, 64, 4);
  const auto make = [] { return test::small_mlp(5); };
  const grid::Settings settings(peft::Lora({.r = 2, .alpha = 4, .targets = {"0"}}));
  const grid::RunOptions options{.trainer = test::quiet(), .steps = 6};

  const auto report = grid::run<G>(make, train, held_out, options, settings);
  REQUIRE(report.results.size() == 6);
  CHECK(report.results[0].combination == grid::Combination{});
  for (std::size_t i = 0; i < report.results.size(); ++i) {
    const auto& r = report.results[i];
    if (r.combination.peft == "lora" && r.combination.quant == "qat") {
      CHECK_THAT(r.error, Contains("quant::Qat: layer 'layers.0' carries another extension"));
      continue;
    }
    INFO(r.combination.key() << ": " << r.error);
    REQUIRE(r.ran());
    CHECK(r.step_ms > 0);
    CHECK((r.accuracy >= 0 && r.accuracy <= 1));
    CHECK(r.samples_per_second > 0);
  }
  // LoRA trains fewer parameters than full fine-tuning.
  CHECK(report.results[3].combination.peft == "lora");
  CHECK(report.results[3].trainable < report.results[0].trainable);

  SECTION("autotune: its choice ran, is within the bound, and nothing within it is faster") {
    // The rule, stated here: among the results that ran with accuracy >= baseline - bound, the
    // smallest step time; the baseline when none beats it.
    auto options_any = options;
    options_any.bound = 1.0;  // every accuracy is within
    const auto choice = grid::autotune<G>(make, train, held_out, options_any, settings);
    const auto& results = choice.evidence.results;
    const auto chosen = std::find_if(results.begin(), results.end(),
                                     [&](const grid::Result& r) { return r.combination == choice.best; });
    REQUIRE(chosen != results.end());
    CHECK(chosen->ran());
    for (const auto& r : results)
      if (r.ran()) CHECK(r.step_ms >= chosen->step_ms);
  }
  SECTION("autotune: a spent budget runs only the baseline, and chooses it") {
    auto hurried = options;
    hurried.budget_seconds = 1e-9;
    const auto choice = grid::autotune<G>(make, train, held_out, hurried, settings);
    CHECK(choice.best == grid::Combination{});
    CHECK(choice.evidence.results.size() == 6);
    CHECK(choice.evidence.results[1].error == "the time budget was spent");
  }
  SECTION("learning rates: lr times the Peft policy's scale, 1 for a policy without one") {
    const grid::RunOptions scaled{.lr = 2e-3, .lr_scale = {{"lora", 3.0}}};
    CHECK(scaled.lr_for({.peft = "lora"}) == Approx(6e-3));
    CHECK(scaled.lr_for({.peft = "full"}) == Approx(2e-3));
    CHECK(scaled.lr_for({.peft = "adapter"}) == Approx(2e-3));
  }
  SECTION("bad options") {
    auto bad = options;
    bad.steps = 1;
    CHECK_THAT(test::message_of([&] { grid::run<G>(make, train, held_out, bad, settings); }),
               Contains("grid::RunOptions: steps must be >= 2"));
  }
}

TEST_CASE("autotune takes the precisions and the Peft policies in turn, so a budget that ends part-way has tried each",
          "[grid]") {
  using grid::Combination;
  // The order written out: the precisions alternate; within each, every Peft policy's first
  // combination comes before any policy's second, each policy's own in grid order.
  const Combination fp32_full, fp32_lora{.peft = "lora"}, fp32_adapter{.peft = "adapter"};
  const Combination fp32_full_ckpt{.memory = "checkpoint"}, fp32_lora_ckpt{.peft = "lora", .memory = "checkpoint"};
  const Combination bf16_full{.precision = "bf16"}, bf16_lora{.precision = "bf16", .peft = "lora"};
  const Combination bf16_full_ckpt{.precision = "bf16", .memory = "checkpoint"};
  const std::vector<Combination> grid_order = {fp32_full, fp32_full_ckpt, fp32_lora, fp32_lora_ckpt, fp32_adapter,
                                               bf16_full, bf16_full_ckpt, bf16_lora};
  const std::vector<Combination> in_turn = {fp32_full,    bf16_full,      fp32_lora,      bf16_lora,
                                            fp32_adapter, bf16_full_ckpt, fp32_full_ckpt, fp32_lora_ckpt};
  CHECK(grid::detail::autotune_order(grid_order) == in_turn);

  using G = grid::Grid<grid::Axis<precision::Fp32, precision::Bf16Mixed>, grid::Axis<peft::Full, peft::Lora>,
                       grid::Axis<memory::None>, grid::Axis<parallel::Single>, grid::Axis<quant::None, quant::DynamicInt8>>;
  auto train = test::random_batches(2, 32, 3);
  auto held_out = test::random_batches(1, 64, 4);
  const auto make = [] { return test::small_mlp(5); };
  const grid::Settings settings(peft::Lora({.r = 2, .alpha = 4, .targets = {"0"}}));
  const auto choice = grid::autotune<G>(make, train, held_out, {.trainer = test::quiet(), .steps = 2}, settings);
  std::vector<std::string> ran;
  for (const auto& r : choice.evidence.results) ran.push_back(r.combination.key());
  CHECK(ran == std::vector<std::string>{"fp32/full/none/single/none", "bf16/full/none/single/none",
                                        "fp32/lora/none/single/none", "bf16/lora/none/single/none",
                                        "fp32/full/none/single/dynamic-int8", "bf16/full/none/single/dynamic-int8",
                                        "fp32/lora/none/single/dynamic-int8", "bf16/lora/none/single/dynamic-int8"});
  // grid::run keeps the grid order.
  const auto report = grid::run<G>(make, train, held_out, {.trainer = test::quiet(), .steps = 2}, settings);
  CHECK(report.results[1].combination.key() == "fp32/full/none/single/dynamic-int8");
}
