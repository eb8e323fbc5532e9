// Tests for include/ftopt/callbacks/progress_bar.hpp.
#include <catch2/catch.hpp>

#include <sstream>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("ProgressBar draws epoch, bar, metrics and ETA", "[callbacks]") {
  callbacks::ProgressBar bar({.width = 10});
  FitState state;
  state.epoch = 0;
  state.epochs = 3;
  state.step = 5;
  state.steps_per_epoch = 10;
  state.epoch_seconds = 2.0;
  CHECK(bar.line(state, 0.5, 0.5, 500) ==
        "epoch 1/3 [#####.....]  5/10  loss 0.5000  acc 50.0%  250 samples/s  ETA 0:02");
  state.steps_per_epoch.reset();
  CHECK(bar.line(state, 1.25, std::nullopt, 100) == "epoch 1/3 step 5  loss 1.2500  50 samples/s");
}

TEST_CASE("ProgressBar writes one finished line per epoch into a log", "[callbacks]") {
  std::ostringstream out;
  auto model = test::small_mlp();
  Trainer<> trainer({.epochs = 2, .device = torch::kCPU, .report_hardware = false});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  trainer.fit(model, optimizer, test::random_batches(3, 4), callbacks::ProgressBar({.out = &out}));
  const auto text = out.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);
  CHECK(text.find('\r') == std::string::npos);
  CHECK_THAT(text, Catch::StartsWith("epoch 1/2 [########################] 3/3  loss "));
  CHECK_THAT(text, Catch::Contains("\nepoch 2/2 "));
}
