// Tests for include/ftopt/trainer/epoch.hpp: one epoch's pass steps on each batch in order, flags
// the last one (its accumulation window closes there), counts the micro-batches in the FitState,
// stops after the batch whose on_step_end says Signal::Stop, and names an empty batch range.
#include <catch2/catch.hpp>

#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::message_of;
using ftopt::test::quiet;
using Catch::Matchers::Contains;

namespace {

/// Records the step count it sees; asks to stop once `stop_at` micro-batches are done (0: never).
struct StepWatcher {
  std::int64_t stop_at = 0;
  std::vector<std::int64_t>* seen;
  Signal on_step_end(const FitState& s) {
    seen->push_back(s.step);
    return s.step == stop_at ? Signal::Stop : Signal::Continue;
  }
};

struct Pass {
  std::vector<bool> lasts;              ///< the `last` flag of each step
  std::vector<std::int64_t> firsts;     ///< each step's input[0][0], to name the batch
  std::vector<std::int64_t> callbacks;  ///< FitState::step as on_step_end saw it
  std::int64_t steps = 0, samples = 0;
  bool stopped = false;
};

/// run_epoch over `batches` (4 samples each, input[0][0] = the batch's index) as fit drives it.
template <class R>
Pass pass(R& batches, std::int64_t stop_at = 0) {
  Pass out;
  trainer::Metrics metrics;
  metrics.begin_fit(1, std::nullopt, 0, 1, 0, 0.1);
  metrics.begin_epoch(0, torch::kCPU);
  auto hooks = std::make_tuple(StepWatcher{stop_at, &out.callbacks});
  out.stopped = trainer::run_epoch(batches, hooks, metrics, [&](const at::Tensor& x, const at::Tensor& y, bool last) {
    out.lasts.push_back(last);
    out.firsts.push_back(x[0][0].item<std::int64_t>());
    const auto scores = torch::zeros({x.size(0), 3});
    metrics.record(torch::tensor(1.0), scores, y, torch::kCPU);
  });
  out.steps = metrics.fit.step;
  out.samples = metrics.fit.samples;
  return out;
}

test::Batches numbered_batches(int count) {
  test::Batches out;
  for (int i = 0; i < count; ++i) out.emplace_back(torch::full({4, 6}, i), torch::zeros({4}, torch::kLong));
  return out;
}

} // namespace

TEST_CASE("run_epoch: each batch in order, the last flagged, stopped after the batch a callback names",
          "[trainer]") {
  auto batches = numbered_batches(3);
  SECTION("to the end") {
    const auto p = pass(batches);
    CHECK_FALSE(p.stopped);
    CHECK(p.firsts == std::vector<std::int64_t>{0, 1, 2});
    CHECK(p.lasts == std::vector<bool>{false, false, true});
    CHECK(p.callbacks == std::vector<std::int64_t>{1, 2, 3});  // after each micro-batch is counted
    CHECK(p.steps == 3);
    CHECK(p.samples == 12);
  }
  SECTION("Signal::Stop after the second batch: the third is never taken") {
    const auto p = pass(batches, 2);
    CHECK(p.stopped);
    CHECK(p.firsts == std::vector<std::int64_t>{0, 1});
    CHECK(p.lasts == std::vector<bool>{false, false});
    CHECK(p.steps == 2);
  }
  SECTION("any batch shape: (input, target) tuples") {
    std::vector<std::tuple<torch::Tensor, torch::Tensor>> tuples;
    for (auto& [x, y] : batches) tuples.emplace_back(x, y);
    const auto p = pass(tuples);
    CHECK(p.firsts == std::vector<std::int64_t>{0, 1, 2});
    CHECK(p.lasts.back());
  }
  SECTION("one batch is both the first and the last") {
    auto one = numbered_batches(1);
    CHECK(pass(one).lasts == std::vector<bool>{true});
  }
}

TEST_CASE("run_epoch: an empty batch range is named with its epoch", "[trainer][errors]") {
  CHECK_THAT(message_of([] {
               auto model = test::small_mlp();
               Trainer<> trainer(quiet());
               torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
               trainer.fit(model, optimizer, test::Batches{});
             }),
             Contains("the batch range is empty in epoch 0"));
}
