// Tests for include/ftopt/grid/grid.hpp: the cartesian product filtered by the combination rules
// at compile time, selection by name at run time, variants of one Trainer type. The report's
// marks: report.cpp; runs and autotune: run.cpp; the report as documents: tests/report/grid.cpp.
#include <catch2/catch.hpp>

#include <algorithm>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

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
