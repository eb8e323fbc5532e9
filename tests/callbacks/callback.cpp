// Tests for include/ftopt/callbacks/callback.hpp: callbacks see every hook in order and can stop fit.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

TEST_CASE("Callbacks see every hook in order and can stop fit", "[trainer][callbacks]") {
  auto batches = test::random_batches(4, 4);
  struct Log {
    std::vector<std::string> events;
    std::int64_t stop_after_steps = -1, stop_after_epoch = -1;
    void on_fit_begin(const FitState&) { events.push_back("fit_begin"); }
    void on_epoch_begin(const FitState& s) { events.push_back("epoch_begin " + std::to_string(s.epoch)); }
    Signal on_step_end(const FitState& s) {
      events.push_back("step " + std::to_string(s.step));
      return s.step == stop_after_steps ? Signal::Stop : Signal::Continue;
    }
    Signal on_epoch_end(const FitState& s, const EpochStats&) {
      events.push_back("epoch_end " + std::to_string(s.epoch));
      return s.epoch == stop_after_epoch ? Signal::Stop : Signal::Continue;
    }
    void on_fit_end(const FitSummary& f) { events.push_back("fit_end " + std::to_string(f.epochs.size())); }
  };
  struct OnlyEpochs {  // implements one hook; the rest are optional
    int epochs = 0;
    void on_epoch_end(const FitState&, const EpochStats&) { ++epochs; }
  };
  auto model = test::small_mlp();
  Trainer<> trainer(quiet({.epochs = 3}));
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));

  SECTION("all hooks, in order") {
    Log log;
    OnlyEpochs counter;
    auto summary = trainer.fit(model, optimizer, test::random_batches(2, 4), log, counter);
    CHECK(log.events == std::vector<std::string>{"fit_begin", "epoch_begin 0", "step 1", "step 2",
                                                 "epoch_end 0", "epoch_begin 1", "step 1", "step 2",
                                                 "epoch_end 1", "epoch_begin 2", "step 1", "step 2",
                                                 "epoch_end 2", "fit_end 3"});
    CHECK(counter.epochs == 3);
    CHECK_FALSE(summary.stopped_early);
  }
  SECTION("stop inside an epoch") {
    Log log{.stop_after_steps = 3};
    auto summary = trainer.fit(model, optimizer, batches, log);
    CHECK(summary.stopped_early);
    REQUIRE(summary.epochs.size() == 1);
    CHECK(summary.epochs[0].steps == 3);
  }
  SECTION("stop at an epoch's end") {
    Log log{.stop_after_epoch = 1};
    auto summary = trainer.fit(model, optimizer, batches, log);
    CHECK(summary.stopped_early);
    CHECK(summary.epochs.size() == 2);
  }
}
