// Tests for include/ftopt/precision/fp16_mixed.hpp and loss scaling in the Trainer: where fp16
// cannot run, a skipped NaN step, accumulation under each policy (a user-written loss-scaling
// policy on fp32 stands in where the build has no CPU fp16 autocast).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {

/// A user-written loss-scaling policy on fp32 (no autocast), so the Trainer's handling of
/// skipped steps can be tested on a CPU build without fp16 autocast.
struct ScaledFp32 : precision::Fp32 {
  static constexpr bool skips_non_finite_steps = true;
  precision::GradScaler scaler{{.init_scale = 1024}};
  void backward(const torch::Tensor& loss) { scaler.scale(loss).backward(); }
  void unscale(torch::optim::Optimizer& o) { scaler.unscale(o); }
  bool step(torch::optim::Optimizer& o) { return scaler.step(o); }
  void update() { scaler.update(); }
};

/// accumulated_against_whole (support.hpp) for a precision policy, with checkpointing
/// (memory::Checkpoint on the ViT's blocks).
template <class Precision>
double checkpointed_accumulation_error() {
  using T = Trainer<Precision, peft::Full, memory::Checkpoint>;
  return test::accumulated_against_whole(T(quiet(), {}, {}, {.accumulate = 4}), T(quiet()));
}

} // namespace

TEST_CASE("Fp16Mixed says where it cannot run", "[precision][fp16]") {
  auto model = test::small_mlp();
  if constexpr (compat::cpu_fp16_autocast) {
    // LibTorch >= 2.4 autocasts to fp16 on the CPU: a CPU model is taken (peer.fp16_scaler trains
    // one against torch.amp.GradScaler("cpu")).
    Trainer<precision::Fp16Mixed> trainer(quiet());
    CHECK_NOTHROW(trainer.prepare(model));
  } else if (!torch::cuda::is_available()) {
    CHECK_THAT(test::message_of([] { Trainer<precision::Fp16Mixed> trainer(quiet()); }),
               Catch::Contains("fp16 autocast needs a CUDA device") && Catch::Contains("use precision::Bf16Mixed there"));
  } else {
    Trainer<precision::Fp16Mixed> trainer(quiet());
    CHECK_THAT(test::message_of([&] { trainer.prepare(model); }), Catch::Contains("the model is on the CPU"));
  }
}

TEST_CASE("A loss-scaling policy skips a NaN step, the epoch and train_step report it", "[precision][scaler]") {
  auto model = test::small_mlp();
  TrainerOptions options = quiet();
  options.loss = test::nan_on_call(2);
  Trainer<ScaledFp32> trainer(options);
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  auto batches = test::random_batches(3, 4);
  SECTION("fit counts it skipped and leaves the weights") {
    std::vector<torch::Tensor> after_first;
    test::SnapshotAt snap{1, model.get(), &after_first};
    auto stats = trainer.fit(model, optimizer, test::Batches(batches.begin(), batches.begin() + 2), snap).epochs.at(0);
    CHECK(stats.skipped_steps == 1);
    CHECK(stats.optimizer_steps == 1);
    CHECK(test::same_values(after_first, test::snapshot(*model)));  // the NaN step changed nothing
    CHECK(trainer.precision().scaler.current_scale() == 512);      // and the scale backed off
  }
  SECTION("train_step says the skipped step was not taken") {
    // StepResult::stepped is the precision policy's answer, not "the window closed".
    CHECK(trainer.train_step(model, optimizer, batches[0]).stepped);
    const auto after_first = test::snapshot(*model);
    CHECK_FALSE(trainer.train_step(model, optimizer, batches[1]).stepped);  // the NaN loss
    CHECK(test::same_values(after_first, test::snapshot(*model)));
    CHECK(trainer.train_step(model, optimizer, batches[2]).stepped);
  }
}


TEST_CASE("Accumulation with checkpointing equals one large batch under each precision policy",
          "[precision][memory]") {
  // Losses averaged the same way (each micro-batch's mean / 4); what remains is rounding: fp32
  // sums in another order, bf16 autocast rounds the forward's products, and the scaled policy
  // unscales once per window (GradScaler: unscale_ after the last micro-batch).
  CHECK(checkpointed_accumulation_error<precision::Fp32>() < 1e-5);
  CHECK(checkpointed_accumulation_error<ScaledFp32>() < 1e-5);
  CHECK(checkpointed_accumulation_error<precision::Bf16Mixed>() < 2e-3);
}
