// Tests for include/ftopt/memory/optimizer_in_backward.hpp: stepping each parameter inside the
// backward gives the same parameters as stepping after it (AdamW's update of a parameter reads
// only that parameter's gradient and state), with a schedule, param groups, checkpointing and
// AdamW8bit; the gradients never all live at once; and what cannot combine is refused by name.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/memory/checkpoint.hpp>
#include <ftopt/memory/optimizer_in_backward.hpp>
#include <ftopt/memory/support/peak.hpp>
#include <ftopt/optim/adamw8bit.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/precision/bf16_mixed.hpp>
#include <ftopt/precision/fp16_mixed.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"

using namespace ftopt;
using test::quiet;

namespace {

test::Batches vit_batches(int count, std::uint64_t seed = 81) {
  torch::manual_seed(seed);
  test::Batches batches;
  for (int i = 0; i < count; ++i) batches.emplace_back(torch::randn({8, 1, 28, 28}), torch::randint(0, 10, {8}));
  return batches;
}

/// Trains the tiny ViT for one epoch over `batches` with `trainer` and an optimizer built by
/// `make(groups)`; returns the parameters after.
template <class T, class Make>
std::vector<torch::Tensor> trained(T trainer, const test::Batches& batches, Make make) {
  auto model = test::tiny_vit(80);
  auto optimizer = make(trainer.parameter_groups(model, torch::optim::AdamWOptions(1e-2).weight_decay(0.1)));
  torch::manual_seed(82);
  trainer.fit(model, optimizer, batches);
  CHECK(trainer.progress().optimizer_steps == static_cast<std::int64_t>(batches.size()));
  return test::snapshot(*model);
}

auto adamw = [](std::vector<torch::optim::OptimizerParamGroup> groups) { return torch::optim::AdamW(groups); };
auto adamw8bit = [](std::vector<torch::optim::OptimizerParamGroup> groups) { return optim::AdamW8bit(groups); };

void check_same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i);
    CHECK(torch::allclose(a[i], b[i], 1e-5, 1e-6));
  }
}

} // namespace

TEST_CASE("Stepping in the backward gives the parameters stepping after it gives", "[memory][optimizer_in_backward]") {
  const auto batches = vit_batches(4);
  const TrainerOptions options = quiet({.schedule = schedule::WarmupCosine{.warmup_steps = 2}});
  SECTION("full fine-tuning, AdamW, a warmup-cosine schedule") {
    check_same(trained(Trainer<>(options), batches, adamw),
               trained(Trainer<precision::Fp32, peft::Full, memory::OptimizerInBackward<>>(options), batches, adamw));
  }
  SECTION("AdamW8bit") {
    check_same(trained(Trainer<>(options), batches, adamw8bit),
               trained(Trainer<precision::Fp32, peft::Full, memory::OptimizerInBackward<>>(options), batches, adamw8bit));
  }
  SECTION("LoRA+ param groups (two learning rates) under Bf16Mixed") {
    const peft::Lora lora({.r = 4, .targets = {"query", "value"}, .modules_to_save = {"classifier"},
                           .loraplus_lr_ratio = 8});
    check_same(trained(Trainer<precision::Bf16Mixed, peft::Lora>(options, {}, lora), batches, adamw),
               trained(Trainer<precision::Bf16Mixed, peft::Lora, memory::OptimizerInBackward<>>(options, {}, lora),
                       batches, adamw));
  }
  SECTION("with checkpointed blocks") {
    using Stepping = memory::OptimizerInBackward<memory::Checkpoint>;
    check_same(trained(Trainer<precision::Fp32, peft::Full, memory::Checkpoint>(options, {}, {}, {.every = 1}),
                       batches, adamw),
               trained(Trainer<precision::Fp32, peft::Full, Stepping>(options, {}, {}, Stepping({.every = 1})),
                       batches, adamw));
  }
}

TEST_CASE("Stepping in the backward frees each gradient as it steps", "[memory][optimizer_in_backward]") {
  // Wide layers and a batch of 2: the gradients dominate the step's memory.
  auto peak_of_third_step = [&](auto trainer) {
    torch::manual_seed(84);
    torch::nn::Sequential net(nn::Linear(784, 1024), torch::nn::ReLU(), nn::Linear(1024, 1024), torch::nn::ReLU(),
                              nn::Linear(1024, 10));
    torch::optim::SGD optimizer(trainer.prepare(net), torch::optim::SGDOptions(0.01));
    const auto batch = std::pair{torch::randn({2, 784}), torch::randint(0, 10, {2})};
    for (int i = 0; i < 2; ++i) trainer.train_step(net, optimizer, batch);
    memory::PeakMemory::reset();
    const auto result = trainer.train_step(net, optimizer, batch);
    CHECK(result.stepped);
    for (const auto& p : net->parameters()) CHECK_FALSE(p.grad().defined());
    return static_cast<double>(memory::PeakMemory::peak());
  };
  const double after = peak_of_third_step(Trainer<>(quiet({.device = torch::kCPU})));
  const double inside = peak_of_third_step(
      Trainer<precision::Fp32, peft::Full, memory::OptimizerInBackward<>>(quiet({.device = torch::kCPU})));
  // Stepping after the backward holds every gradient, (784 + 1) 1024 + (1024 + 1) 1024 +
  // (1024 + 1) 10 floats; stepping inside it, one at a time: at most the largest, 1024 x 1024
  // (the activations of a batch of 2 are a few KiB).
  const double all_grads = 4.0 * ((784 + 1) * 1024 + (1024 + 1) * 1024 + (1024 + 1) * 10);
  const double largest_grad = 4.0 * 1024 * 1024;
  INFO("peak stepping after " << after / (1 << 20) << " MiB, inside " << inside / (1 << 20) << " MiB");
  CHECK(after >= all_grads);
  CHECK(inside <= 1.02 * largest_grad);
}

TEST_CASE("Stepping in the backward refuses accumulation and global-norm clipping by name",
          "[memory][optimizer_in_backward][errors]") {
  using Stepping = memory::OptimizerInBackward<>;
  CHECK_THAT(test::message_of([] {
               Trainer<precision::Fp32, peft::Full, Stepping>(quiet(), {}, {}, Stepping(memory::None{.accumulate = 4}));
             }),
             Catch::Contains("memory::OptimizerInBackward: gradient accumulation (accumulate = 4) cannot combine"));
  CHECK_THAT(test::message_of([] { Trainer<precision::Fp32, peft::Full, Stepping>(quiet({.clip_grad_norm = 1.0})); }),
             Catch::Contains("TrainerOptions::clip_grad_norm = 1 cannot combine with stepping the optimizer in the "
                             "backward (optimizer-in-backward)"));
  // The combinations the rules refuse at compile time (tests/compile_fail/step_in_backward_*).
  STATIC_REQUIRE(rules::broken_rule<precision::Fp16Mixed, peft::Full, Stepping, parallel::Single, quant::None>() ==
                 rules::rule::step_in_backward_under_loss_scaling);
  STATIC_REQUIRE(rules::broken_rule<precision::Bf16Mixed, peft::Full, Stepping, parallel::Single, quant::None>() ==
                 nullptr);
}
