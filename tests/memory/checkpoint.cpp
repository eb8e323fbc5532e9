// Tests for include/ftopt/memory/checkpoint.hpp: the policy in the Trainer, with accumulation,
// Bf16Mixed autocast, LoRA and prefix tuning, and the per-epoch peak memory it lowers.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/memory/checkpoint.hpp>
#include <ftopt/models/vit.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/peft/prefix.hpp>
#include <ftopt/precision/bf16_mixed.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using test::quiet;

namespace {

models::ViT dropout_vit(std::uint64_t seed, std::int64_t layers = 3) {
  torch::manual_seed(seed);
  return models::ViT({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = 16, .layers = layers, .heads = 2,
                      .intermediate = 32, .num_labels = 10, .dropout = 0.1});
}

test::Batches image_batches(int count, int size, std::uint64_t seed = 12) {
  torch::manual_seed(seed);
  test::Batches batches;
  for (int i = 0; i < count; ++i) batches.emplace_back(torch::randn({size, 1, 28, 28}), torch::randint(0, 10, {size}));
  return batches;
}

/// The trainable parameters' gradients after one train_step on `batch` (the step does not close
/// an accumulation window, so the gradients stay).
template <class T>
std::vector<torch::Tensor> step_grads(T& trainer, models::ViT& model, const test::Batches::value_type& batch) {
  torch::manual_seed(13);  // the same adapter initialization and dropout draws for both runs
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  trainer.train_step(model, optimizer, batch);
  std::vector<torch::Tensor> grads;
  for (const auto& p : trainer.prepare(model)) grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return grads;
}

double largest_gap(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].defined());
    REQUIRE(b[i].defined());
    worst = std::max(worst, (a[i].to(torch::kFloat) - b[i].to(torch::kFloat)).abs().max().item<double>());
  }
  return worst;
}

} // namespace

TEST_CASE("memory::Checkpoint in the Trainer: the plain gradients, under Bf16Mixed autocast and with LoRA",
          "[memory][checkpoint]") {
  const auto batch = image_batches(1, 6).front();
  // A window of 2 keeps the first micro-batch's gradients for inspection.
  SECTION("Fp32, full fine-tuning") {
    auto a = dropout_vit(1), b = dropout_vit(1);
    Trainer<precision::Fp32, peft::Full, memory::None> plain(quiet(), {}, {}, {.accumulate = 2});
    Trainer<precision::Fp32, peft::Full, memory::Checkpoint> recomputed(quiet(), {}, {}, {.accumulate = 2});
    CHECK(largest_gap(step_grads(plain, a, batch), step_grads(recomputed, b, batch)) == 0.0);
  }
  SECTION("Bf16Mixed: the recompute runs under the forward's autocast") {
    auto a = dropout_vit(1), b = dropout_vit(1);
    Trainer<precision::Bf16Mixed, peft::Full, memory::None> plain(quiet(), {}, {}, {.accumulate = 2});
    Trainer<precision::Bf16Mixed, peft::Full, memory::Checkpoint> recomputed(quiet(), {}, {}, {.accumulate = 2});
    CHECK(largest_gap(step_grads(plain, a, batch), step_grads(recomputed, b, batch)) < 1e-6);
  }
  SECTION("LoRA: frozen embeddings feed the blocks, only the adapters train") {
    const peft::LoraOptions lora{.r = 4, .alpha = 8, .targets = {"query", "value"}};
    auto a = dropout_vit(1), b = dropout_vit(1);
    Trainer<precision::Bf16Mixed, peft::Lora, memory::None> plain(quiet(), {}, peft::Lora(lora), {.accumulate = 2});
    Trainer<precision::Bf16Mixed, peft::Lora, memory::Checkpoint> recomputed(quiet(), {}, peft::Lora(lora),
                                                                           {.accumulate = 2});
    const auto want = step_grads(plain, a, batch), got = step_grads(recomputed, b, batch);
    CHECK(want.size() == 3 * 2 * 2);  // 3 blocks x (query, value) x (A, B)
    CHECK(largest_gap(want, got) < 1e-6);
  }
  SECTION("Prefix tuning: the prefix encoder lives outside the blocks") {
    auto a = dropout_vit(1), b = dropout_vit(1);
    Trainer<precision::Fp32, peft::Prefix, memory::None> plain(quiet(), {}, peft::Prefix({.num_virtual_tokens = 3}),
                                                               {.accumulate = 2});
    Trainer<precision::Fp32, peft::Prefix, memory::Checkpoint> recomputed(quiet(), {}, peft::Prefix({.num_virtual_tokens = 3}),
                                                                        {.accumulate = 2});
    CHECK(largest_gap(step_grads(plain, a, batch), step_grads(recomputed, b, batch)) < 1e-6);
  }
}

TEST_CASE("memory::Checkpoint with accumulate 4 x 8 equals one batch of 32", "[memory][checkpoint]") {
  auto micro = image_batches(4, 8);
  std::vector<torch::Tensor> xs, ys;
  for (auto& [x, y] : micro) xs.push_back(x), ys.push_back(y);
  test::Batches full{{torch::cat(xs), torch::cat(ys)}};
  auto a = test::tiny_vit(2), b = test::tiny_vit(2);
  Trainer<precision::Fp32, peft::Full, memory::Checkpoint> by_four(quiet(), {}, {}, {.accumulate = 4});
  Trainer<> at_once(quiet());
  torch::optim::SGD opt_a(by_four.prepare(a), torch::optim::SGDOptions(0.5));
  torch::optim::SGD opt_b(at_once.prepare(b), torch::optim::SGDOptions(0.5));
  CHECK(by_four.fit(a, opt_a, micro).epochs[0].optimizer_steps == 1);
  at_once.fit(b, opt_b, full);
  auto pa = test::snapshot(*a), pb = test::snapshot(*b);
  for (std::size_t i = 0; i < pa.size(); ++i) CHECK(torch::allclose(pa[i], pb[i], 1e-4, 1e-6));
}

TEST_CASE("memory::Checkpoint checkpoint_sequential's a torch::nn::Sequential model", "[memory][checkpoint]") {
  auto make = [] {
    torch::manual_seed(14);
    return torch::nn::Sequential(torch::nn::Linear(6, 32), torch::nn::ReLU(), torch::nn::Dropout(0.2),
                                 torch::nn::Linear(32, 32), torch::nn::ReLU(), torch::nn::Linear(32, 3));
  };
  auto a = make(), b = make();
  auto batches = test::random_batches(3, 8);
  Trainer<> plain(quiet());
  Trainer<precision::Fp32, peft::Full, memory::Checkpoint> recomputed(quiet(), {}, {}, {.segments = 3});
  torch::optim::SGD opt_a(plain.prepare(a), torch::optim::SGDOptions(0.1));
  torch::optim::SGD opt_b(recomputed.prepare(b), torch::optim::SGDOptions(0.1));
  torch::manual_seed(15);
  plain.fit(a, opt_a, batches);
  torch::manual_seed(15);
  recomputed.fit(b, opt_b, batches);
  CHECK(test::same_values(test::snapshot(*a), test::snapshot(*b)));
}

TEST_CASE("Checkpointing lowers the Trainer's per-epoch peak memory", "[memory][checkpoint]") {
  auto batches = image_batches(2, 32);
  auto peak_with = [&](auto trainer) {
    auto model = test::tiny_vit(3, /*hidden=*/32, /*layers=*/6);
    torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
    return trainer.fit(model, optimizer, batches).epochs[0].peak_memory;
  };
  const auto plain = peak_with(Trainer<>(quiet()));
  const auto recomputed = peak_with(Trainer<precision::Fp32, peft::Full, memory::Checkpoint>(quiet()));
  INFO("plain " << plain << " bytes, checkpointed " << recomputed << " bytes");
  CHECK(plain > 0);
  CHECK(recomputed < plain * 6 / 10);
}

TEST_CASE("memory::Checkpoint rejects bad settings by name", "[memory][checkpoint]") {
  using T = Trainer<precision::Fp32, peft::Full, memory::Checkpoint>;
  CHECK_THAT(test::message_of([] { T(quiet(), {}, {}, {.every = 0}); }),
             Contains("memory::Checkpoint: every must be >= 1, got 0"));
  CHECK_THAT(test::message_of([] { T(quiet(), {}, {}, {.accumulate = -1}); }),
             Contains("memory::Checkpoint: accumulate must be >= 1, got -1"));
}
