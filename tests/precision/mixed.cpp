// Tests for include/ftopt/precision/{bf16_mixed,fp16_mixed,bf16_true}.hpp in the Trainer.
#include <catch2/catch.hpp>

#include <limits>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {


/// Gradients of one cross-entropy backward, in parameter order.
template <class Precision>
std::vector<torch::Tensor> gradients(models::ViT& model, Precision precision, const torch::Tensor& x, const torch::Tensor& y) {
  precision.prepare(*model);
  for (auto& p : model->parameters()) p.mutable_grad().reset();
  torch::Tensor out;
  {
    [[maybe_unused]] auto scope = precision.forward_scope();
    out = model->forward(x);
  }
  torch::nn::functional::cross_entropy(precision.loss_input(out), y).backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

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
} // namespace

TEST_CASE("Bf16Mixed: bf16 forward, fp32 loss and gradients close to fp32's", "[precision][bf16]") {
  torch::manual_seed(3);
  auto x = torch::randn({16, 1, 28, 28});
  auto y = torch::randint(0, 10, {16});
  auto model = test::tiny_vit(1, 32);
  auto fp32 = gradients(model, precision::Fp32{}, x, y);
  auto bf16 = gradients(model, precision::Bf16Mixed{}, x, y);
  // bf16 keeps 8 significant bits (relative rounding 2^-8 = 0.4% per op); summed over a
  // 2-layer network the gradient as a whole stays within a few percent.
  double num = 0, den = 0;
  for (std::size_t i = 0; i < fp32.size(); ++i) {
    CHECK(bf16[i].scalar_type() == torch::kFloat);  // fp32 master gradients
    num += (bf16[i] - fp32[i]).pow(2).sum().item<double>();
    den += fp32[i].pow(2).sum().item<double>();
  }
  CHECK(std::sqrt(num / den) < 0.03);
  CHECK(std::sqrt(num / den) > 0.0);  // it did run in bf16

  precision::Bf16Mixed policy;
  policy.prepare(*model);
  {
    [[maybe_unused]] auto scope = policy.forward_scope();
    CHECK(model->vit->encoder_layer(0).attention->attention->query(torch::randn({2, 5, 32})).scalar_type() ==
          torch::kBFloat16);
    auto logits = model->forward(x);
    CHECK(policy.loss_input(logits).scalar_type() == torch::kFloat);
  }
  CHECK_FALSE(compat::autocast_enabled(torch::kCPU));  // the scope closed
}

TEST_CASE("Trainer<Bf16Mixed> trains, autocast is off between steps", "[precision][bf16]") {
  auto model = test::tiny_vit(2, 32);
  Trainer<precision::Bf16Mixed> trainer({.epochs = 3, .device = torch::kCPU, .report_hardware = false});
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(3e-3));
  torch::manual_seed(4);
  test::Batches batches{{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32})}};
  auto summary = trainer.fit(model, optimizer, batches);
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  CHECK_FALSE(compat::autocast_enabled(torch::kCPU));
  for (auto& p : model->parameters()) CHECK(p.scalar_type() == torch::kFloat);
}

TEST_CASE("Bf16True keeps weights, gradients and optimizer state in bf16", "[precision][bf16]") {
  auto model = test::small_mlp();
  Trainer<precision::Bf16True> trainer({.epochs = 4, .device = torch::kCPU, .report_hardware = false});
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
  for (auto& p : model->parameters()) CHECK(p.scalar_type() == torch::kBFloat16);
  auto summary = trainer.fit(model, optimizer, test::random_batches(4, 16));
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  for (auto& p : model->parameters()) {
    auto& state = static_cast<torch::optim::AdamWParamState&>(*optimizer.state().at(ftopt::compat::optimizer_state_key(p)));
    CHECK(state.exp_avg().scalar_type() == torch::kBFloat16);
  }
}

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

namespace {

/// accumulated_against_whole (support.hpp) for a precision policy, with checkpointing
/// (memory::Checkpoint on the ViT's blocks).
template <class Precision>
double accumulated_against_whole() {
  using T = Trainer<Precision, peft::Full, memory::Checkpoint>;
  return test::accumulated_against_whole(T(quiet(), {}, {}, {.accumulate = 4}), T(quiet()));
}

} // namespace

TEST_CASE("Accumulation with checkpointing equals one large batch under each precision policy",
          "[precision][memory]") {
  // Losses averaged the same way (each micro-batch's mean / 4); what remains is rounding: fp32
  // sums in another order, bf16 autocast rounds the forward's products, and the scaled policy
  // unscales once per window (GradScaler: unscale_ after the last micro-batch).
  CHECK(accumulated_against_whole<precision::Fp32>() < 1e-5);
  CHECK(accumulated_against_whole<ScaledFp32>() < 1e-5);
  CHECK(accumulated_against_whole<precision::Bf16Mixed>() < 2e-3);
}
