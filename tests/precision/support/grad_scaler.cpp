// Tests for include/ftopt/precision/support/grad_scaler.hpp against torch.amp.GradScaler's documented
// algorithm (torch/amp/grad_scaler.py; the update is ATen's _amp_update_scale_:
// inf -> scale *= backoff, tracker = 0; else tracker + 1, and at growth_interval
// scale *= growth (if finite), tracker = 0).
#include <catch2/catch.hpp>

#include <limits>

#include <torch/torch.h>

#include <ftopt/precision/support/grad_scaler.hpp>

#include "../../support.hpp"

using ftopt::precision::GradScaler;
using ftopt::precision::GradScalerOptions;

TEST_CASE("GradScaler's defaults are PyTorch's", "[precision][scaler]") {
  GradScalerOptions o;
  CHECK(o.init_scale == 65536.0);
  CHECK(o.growth_factor == 2.0);
  CHECK(o.backoff_factor == 0.5);
  CHECK(o.growth_interval == 2000);
}

TEST_CASE("GradScaler follows PyTorch's scale trajectory, skipping inf steps", "[precision][scaler]") {
  // init 8, growth x2 every 3 clean steps, backoff x0.5. Worked out by hand from the rule:
  struct Row {
    bool inf;
    double scale_after;
    std::int64_t tracker_after;
    bool stepped;
  };
  const std::vector<Row> table = {
      {false, 8, 1, true},  {false, 8, 2, true},  {false, 16, 0, true},  // third clean step: grow
      {true, 8, 0, false},                                               // inf: back off, skip
      {false, 8, 1, true},  {false, 8, 2, true},  {false, 16, 0, true},
      {false, 16, 1, true}, {true, 8, 0, false},  {true, 4, 0, false},   // two infs in a row
      {false, 4, 1, true}};
  auto p = torch::ones({2}, torch::requires_grad());
  torch::optim::SGD optimizer({p}, torch::optim::SGDOptions(0.1));
  GradScaler scaler({.init_scale = 8, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
  for (std::size_t i = 0; i < table.size(); ++i) {
    INFO("step " << i);
    const auto& row = table[i];
    const double w = row.inf ? std::numeric_limits<double>::infinity() : 3.0;
    auto before = p.detach().clone();
    p.mutable_grad().reset();
    auto loss = (p * w).sum();
    scaler.scale(loss).backward();
    scaler.unscale(optimizer);
    if (!row.inf) CHECK(torch::allclose(p.grad(), torch::full({2}, 3.0)));  // true gradient again
    CHECK(scaler.step(optimizer) == row.stepped);
    CHECK(scaler.last_step_skipped() == !row.stepped);
    CHECK(torch::equal(p.detach(), before) == !row.stepped);
    scaler.update();
    CHECK(scaler.current_scale() == row.scale_after);
    CHECK(scaler.growth_tracker() == row.tracker_after);
  }
}

TEST_CASE("GradScaler does not grow the scale into infinity", "[precision][scaler]") {
  auto p = torch::ones({1}, torch::requires_grad());
  torch::optim::SGD optimizer({p}, torch::optim::SGDOptions(0.0));
  GradScaler scaler({.init_scale = 3e38, .growth_interval = 1});
  scaler.scale(p.sum()).backward();
  scaler.step(optimizer);
  scaler.update();
  CHECK(scaler.current_scale() == Approx(3e38));  // 6e38 overflows float32: kept
}

TEST_CASE("GradScaler state survives a save and load", "[precision][scaler]") {
  auto p = torch::ones({1}, torch::requires_grad());
  torch::optim::SGD optimizer({p}, torch::optim::SGDOptions(0.1));
  GradScaler scaler({.init_scale = 1024, .growth_interval = 5});
  for (int i = 0; i < 2; ++i) {
    p.mutable_grad().reset();
    scaler.scale(p.sum()).backward();
    scaler.step(optimizer);
    scaler.update();
  }
  torch::serialize::OutputArchive out;
  scaler.save_state(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  GradScaler restored({.init_scale = 1, .growth_interval = 5});
  restored.load_state(in);
  CHECK(restored.current_scale() == 1024);
  CHECK(restored.growth_tracker() == 2);
}

TEST_CASE("GradScaler rejects bad settings with the value", "[precision][scaler][errors]") {
  using ftopt::test::message_of;
  CHECK_THAT(message_of([] { GradScaler({.init_scale = 0}); }), Catch::Contains("init_scale must be finite and > 0, got 0"));
  CHECK_THAT(message_of([] { GradScaler({.growth_factor = 0.5}); }), Catch::Contains("growth_factor must be > 1, got 0.5"));
  CHECK_THAT(message_of([] { GradScaler({.backoff_factor = 1.5}); }), Catch::Contains("backoff_factor must be in (0, 1), got 1.5"));
  CHECK_THAT(message_of([] { GradScaler({.growth_interval = 0}); }), Catch::Contains("growth_interval must be >= 1, got 0"));
}
