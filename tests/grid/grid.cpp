// The policy grid: the cartesian product filtered by the combination rules at compile time,
// selection by name at run time, the report's marks (flags, Pareto front, the choice), runs
// and autotune on a small model, and the profiler's Chrome trace. The report as documents:
// tests/report/grid.cpp.
#include <catch2/catch.hpp>

#include <algorithm>

#include <fstream>
#include <sstream>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/callbacks/profile.hpp>
#include <ftopt/grid/run.hpp>

#include "../support.hpp"
#include "sample_report.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace grid_test {

// 2 x 2 x 2 x 1 x 2 = 16 combinations.
using Small = grid::Grid<grid::Axis<precision::Fp32, precision::Fp16Mixed>, grid::Axis<peft::Full, peft::Prefix>,
                         grid::Axis<memory::None, memory::Checkpoint>, grid::Axis<parallel::Single>,
                         grid::Axis<quant::None, quant::Qat>>;

static_assert(Small::size() == 16);
// Model-independent rules only: fp16 with fake-quant training is out (2 peft x 2 memory).
static_assert(Small::valid_size() == 12);
// The ViT has prefix attention and checkpointable blocks: the same 12.
static_assert(Small::valid_size<models::ViT>() == 12);
// The MLP has neither: prefix and checkpoint are out too; left: {fp32, fp16} x full x none x
// {none, qat}, minus fp16 + qat = 3.
static_assert(Small::valid_size<models::Mlp>() == 3);

} // namespace grid_test

using namespace grid_test;

TEST_CASE("Grid: the valid combinations, the excluded ones with their rule", "[grid]") {
  const auto valid = Small::combinations<models::Mlp>();
  REQUIRE(valid.size() == 3);
  CHECK(valid[0].key() == "fp32/full/none/single/none");
  CHECK(valid[1].key() == "fp32/full/none/single/qat");
  CHECK(valid[2].key() == "fp16/full/none/single/none");
  CHECK(valid[1].label() == "qat");
  CHECK(valid[0].label() == "baseline");

  const auto excluded = Small::excluded<models::Mlp>();
  CHECK(excluded.size() == 13);
  const auto rule_of = [&](const std::string& key) {
    for (const auto& e : excluded)
      if (e.combination.key() == key) return e.rule;
    return std::string("(not excluded)");
  };
  CHECK(rule_of("fp16/full/none/single/qat") == rules::rule::fake_quant_under_fp16);
  CHECK(rule_of("fp32/prefix/none/single/none") == rules::rule::prefix_needs_attention);
  CHECK(rule_of("fp32/full/checkpoint/single/none") == rules::rule::checkpoint_needs_blocks);
  CHECK(Small::excluded<models::ViT>().size() == 4);
}

TEST_CASE("Grid::visit: the Trainer named at run time, errors naming the axis or the rule", "[grid]") {
  std::string visited;
  Small::visit<models::ViT>(grid::Combination{"fp16", "prefix", "checkpoint"}, [&]<class T>(const grid::Combination& c) {
    CHECK(std::is_same_v<T, Trainer<precision::Fp16Mixed, peft::Prefix, memory::Checkpoint>>);
    visited = c.key();
  });
  CHECK(visited == "fp16/prefix/checkpoint/single/none");

  const auto never = []<class T>(const grid::Combination&) { FAIL("no combination should run"); };
  CHECK_THAT(test::message_of([&] { Small::visit<models::ViT>(grid::Combination{"fp32", "lora"}, never); }),
             Contains("grid: peft 'lora' is not in this grid (peft: full, prefix)"));
  CHECK_THAT(test::message_of([&] {
               Small::visit<models::ViT>(grid::Combination{.precision = "fp16", .quant = "qat"}, never);
             }),
             Contains("grid: fp16/full/none/single/qat is excluded: fake-quant training cannot run under fp16"));
}

TEST_CASE("grid::Variants: one Trainer type under several names, each a setting by name", "[grid]") {
  // 2 precisions x (full + 3 LoRA names) = 8 combinations on 4 Trainer types.
  using G = grid::Grid<grid::Axis<precision::Fp32, precision::Bf16Mixed>,
                       grid::Axis<peft::Full, grid::Variants<peft::Lora, "lora", "rslora", "loraplus">>,
                       grid::Axis<memory::None>>;
  static_assert(G::size() == 8 && G::valid_size() == 8 && G::valid_trainers() == 4);
  const auto names = G::combinations();
  REQUIRE(names.size() == 8);
  CHECK(names[1].key() == "fp32/lora/none/single/none");
  CHECK(names[2].key() == "fp32/rslora/none/single/none");
  CHECK(names[7].key() == "bf16/loraplus/none/single/none");

  const peft::LoraOptions plain{.r = 2, .alpha = 4, .targets = {"0"}};
  peft::LoraOptions rs = plain, plus = plain;
  rs.rslora = true;
  plus.loraplus_lr_ratio = 8;
  const grid::Settings settings(peft::Lora(plain), grid::Named<peft::Lora>{"rslora", peft::Lora(rs)},
                                grid::Named<peft::Lora>{"loraplus", peft::Lora(plus)});
  for (const char* name : {"lora", "rslora", "loraplus"}) {
    bool visited = false;
    G::visit(grid::Combination{.peft = name}, [&]<class T>(const grid::Combination& c) {
      REQUIRE(std::is_same_v<typename T::peft_type, peft::Lora>);
      if constexpr (std::is_same_v<typename T::peft_type, peft::Lora>) {
        const auto options = settings.template trainer<T>(test::quiet(), c).peft().options();
        CHECK(options.rslora == (std::string(name) == "rslora"));
        CHECK(options.loraplus_lr_ratio == (std::string(name) == "loraplus" ? 8 : 0));
        visited = true;
      }
    });
    CHECK(visited);
  }
  CHECK_THAT(test::message_of([&] { G::check(grid::Combination{.peft = "dora"}); }),
             Contains("grid: peft 'dora' is not in this grid (peft: full, lora, rslora, loraplus)"));
  const grid::Settings unnamed{peft::Lora(plain)};
  CHECK_THAT(test::message_of([&] {
               G::visit(grid::Combination{.peft = "rslora"},
                        [&]<class T>(const grid::Combination& c) { (void)unnamed.template trainer<T>({}, c); });
             }),
             Contains("grid::Settings: no grid::Named<lora> named 'rslora' was given"));

  SECTION("grid::run: each name trains its own setting; LoRA+'s groups reach the optimizer") {
    auto train = test::random_batches(3, 32, 3);
    auto held_out = test::random_batches(1, 64, 4);
    std::vector<std::vector<double>> made;  // each optimizer's group learning rates, in run order
    grid::RunOptions options{.trainer = test::quiet(), .steps = 3, .lr = 1e-3,
                             .lr_scale = {{"lora", 3.0}, {"loraplus", 3.0}}};
    options.optimizer = [&](const grid::Trainable& trainable, double lr) {
      auto optimizer = grid::adamw(trainable, lr);
      made.emplace_back();
      for (const auto& group : optimizer->param_groups()) made.back().push_back(group.options().get_lr());
      return optimizer;
    };
    using Fp32Only = grid::Grid<grid::Axis<precision::Fp32>,
                                grid::Axis<peft::Full, grid::Variants<peft::Lora, "lora", "rslora", "loraplus">>,
                                grid::Axis<memory::None>>;
    const auto report = grid::run<Fp32Only>([] { return test::small_mlp(5); }, train, held_out, options, settings);
    REQUIRE(report.results.size() == 4);  // the baseline is the grid's fp32/full
    REQUIRE(made.size() == 4);
    for (const auto& r : report.results) CHECK(r.ran());
    CHECK(report.results[2].combination.peft == "rslora");
    // One group for full (lr), lora (lr x its scale 3) and rslora (no scale given: lr); LoRA+
    // (lr x 3): A's group at that lr, then B's at 8 times it (the MLP's biases stay frozen).
    CHECK(made[0] == std::vector<double>{1e-3});
    REQUIRE(made[1].size() == 1);
    CHECK(made[1][0] == Approx(3e-3));
    CHECK(made[2] == std::vector<double>{1e-3});
    REQUIRE(made[3].size() == 2);
    CHECK(made[3][0] == Approx(3e-3));
    CHECK(made[3][1] == Approx(8 * 3e-3));
    // rsLoRA scales by alpha / sqrt(r) instead of alpha / r: the same parameters, another run.
    CHECK(report.results[2].trainable == report.results[1].trainable);
  }
}

TEST_CASE("Report: flags below the bound and the Pareto front", "[grid]") {
  const auto report = test::sample_report();
  // Baseline 90.0%, bound 0.5 points: adapter (89.0) and freeze (88.0) are flagged.
  CHECK_FALSE(report.results[1].flagged);
  CHECK(report.results[2].flagged);
  CHECK(report.results[4].flagged);
  // The front: lora (fastest), prefix (most accurate), and full, which neither beats on both
  // counts (lora is faster but less accurate, prefix more accurate but slower).
  CHECK(report.results[0].pareto);
  CHECK(report.results[1].pareto);
  CHECK(report.results[3].pareto);
  CHECK_FALSE(report.results[2].pareto);  // lora is faster and more accurate
  CHECK_FALSE(report.results[4].pareto);
  CHECK_FALSE(report.results[5].pareto);  // did not run
  CHECK(report.fastest_within_bound().combination.peft == "lora");
}

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

TEST_CASE("Report::fastest_within_bound picks by the numbers, not by position", "[grid]") {
  // A report written by hand: what autotune chooses from. The baseline is 10 ms at 90%.
  grid::Report report;
  report.bound = 0.005;
  const auto result = [](std::string peft, double ms, double accuracy, std::string error = "") {
    return grid::Result{.combination = {.peft = std::move(peft)}, .step_ms = ms, .accuracy = accuracy,
                        .error = std::move(error)};
  };
  report.results = {result("full", 10, 0.900), result("lora", 6, 0.880), result("adapter", 7, 0.896),
                    result("prefix", 2, 0.0, "did not run")};
  // lora is fastest but 2 points down; prefix did not run; adapter is 0.4 points down: within.
  CHECK(report.fastest_within_bound().combination.peft == "adapter");
  report.bound = 0.03;  // now lora's 2 points are within
  CHECK(report.fastest_within_bound().combination.peft == "lora");
  report.bound = 0.0;   // nothing below the baseline's accuracy: the baseline
  CHECK(report.fastest_within_bound().combination.peft == "full");
}

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
