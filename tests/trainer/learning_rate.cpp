// Tests for include/ftopt/trainer/learning_rate.hpp: a schedule sets each step's learning rate.
#include <catch2/catch.hpp>

#include <cmath>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

TEST_CASE("The warmup-cosine schedule sets each step's learning rate", "[trainer][schedule]") {
  auto batches = test::random_batches(6, 4);
  auto model = test::small_mlp();
  schedule::WarmupCosine schedule{.warmup_steps = 2};
  Trainer<> trainer(quiet({.epochs = 2, .schedule = schedule}));
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.3));
  struct Recorder {
    std::vector<double> lrs;
    void on_step_end(const FitState& s) { lrs.push_back(s.lr); }
  } recorder;
  trainer.fit(model, optimizer, batches, recorder);
  REQUIRE(recorder.lrs.size() == 12);
  // Hugging Face's cosine with warmup 2 over the 12 steps the Trainer derives (2 epochs x 6
  // batches): k / 2 while warming up, then 0.5 (1 + cos(pi (k - 2) / 10)).
  for (std::int64_t k = 0; k < 12; ++k) {
    const double expected = k < 2 ? k / 2.0 : 0.5 * (1 + std::cos(M_PI * static_cast<double>(k - 2) / 10.0));
    CHECK(recorder.lrs[k] == Approx(0.3 * expected));
  }
  CHECK(recorder.lrs[0] == 0.0);   // HF: the first warmup step has lr 0
  CHECK(recorder.lrs[2] == Approx(0.3));
}
