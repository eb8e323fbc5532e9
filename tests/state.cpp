// Tests for include/ftopt/state.hpp: what the live FitState reads from its running sums (the
// mean loss per sample, top-1 accuracy over the classified samples, the main rank), and the
// reports' defaults before anything is recorded.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/state.hpp>

TEST_CASE("FitState: mean loss per sample, accuracy over classified samples, rank 0 is the main one", "[state]") {
  ftopt::FitState state;
  // Nothing recorded yet: no loss, no accuracy, and no tensor is read.
  CHECK(state.mean_loss() == 0.0);
  CHECK_FALSE(state.accuracy().has_value());
  CHECK(state.is_main());

  // Two batches, of 4 samples at mean loss 1.5 and 2 at mean loss 3.0: the sum is 4*1.5 + 2*3 = 12
  // over 6 samples, a mean of 2.0; 5 correct of the 6 classified.
  state.samples = 6;
  state.loss_sum = torch::tensor(4 * 1.5 + 2 * 3.0, torch::kDouble);
  state.correct = torch::tensor(5.0, torch::kDouble);
  state.classified = 6;
  CHECK(state.mean_loss() == Approx(2.0));
  REQUIRE(state.accuracy().has_value());
  CHECK(*state.accuracy() == Approx(5.0 / 6.0));

  // Samples without class targets (a regression batch) count for the loss, not the accuracy.
  state.samples = 8;
  state.loss_sum = torch::tensor(16.0, torch::kDouble);
  CHECK(state.mean_loss() == Approx(2.0));
  CHECK(*state.accuracy() == Approx(5.0 / 6.0));

  state.rank = 1;
  state.world_size = 2;
  CHECK_FALSE(state.is_main());
}

TEST_CASE("The reports start empty", "[state]") {
  const ftopt::EpochStats epoch;
  CHECK(epoch.samples == 0);
  CHECK(epoch.optimizer_steps == 0);
  CHECK_FALSE(epoch.accuracy.has_value());
  CHECK(epoch.phases.data + epoch.phases.forward + epoch.phases.backward + epoch.phases.optimizer == 0.0);
  CHECK(epoch.peak_memory == 0);
  const ftopt::FitSummary summary;
  CHECK(summary.epochs.empty());
  CHECK_FALSE(summary.stopped_early);
  const ftopt::StepResult step;
  CHECK_FALSE(step.stepped);
  CHECK_FALSE(step.loss.defined());
  const ftopt::EvalStats eval;
  CHECK_FALSE(eval.accuracy.has_value());
  CHECK(ftopt::FitState{}.world_size == 1);
}
