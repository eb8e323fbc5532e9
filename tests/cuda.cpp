// CUDA paths, run where LibTorch sees a GPU (benchmarks/gpu/run.sh); on a CPU-only machine each
// test says it was skipped. Checkpointing's CUDA generator save/restore, the caching
// allocator's peak statistics, and the Pipeline's pinned, non-blocking copies.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/memory/support/peak.hpp>
#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/pipeline.hpp>
#include <ftopt/precision/fp16_mixed.hpp>
#include <ftopt/trainer.hpp>

#include "support.hpp"

namespace {

bool have_cuda() {
  if (torch::cuda::is_available()) return true;
  ftopt::test::skip("no CUDA device");
  return false;
}

} // namespace

TEST_CASE("CUDA: checkpointed dropout draws the same masks from the CUDA generator", "[cuda][checkpoint]") {
  if (!have_cuda()) return;
  torch::manual_seed(1);
  torch::nn::Sequential seq(ftopt::nn::Linear(32, 32), torch::nn::Dropout(0.5), ftopt::nn::Linear(32, 32),
                            torch::nn::Dropout(0.5));
  seq->to(torch::kCUDA);
  const auto x = torch::randn({16, 32}, torch::kCUDA);
  auto grads = [&](bool checkpointed, bool preserve) {
    for (auto& p : seq->parameters()) p.mutable_grad() = torch::Tensor();
    torch::manual_seed(2);
    auto y = checkpointed ? ftopt::nn::checkpoint_sequential(seq, 2, x, {.preserve_rng_state = preserve})
                          : seq->forward(x);
    y.pow(2).sum().backward();
    std::vector<torch::Tensor> out;
    for (auto& p : seq->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto plain = grads(false, true), recomputed = grads(true, true), drifted = grads(true, false);
  double same = 0, differ = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    same = std::max(same, (plain[i] - recomputed[i]).abs().max().item<double>());
    differ = std::max(differ, (plain[i] - drifted[i]).abs().max().item<double>());
  }
  CHECK(same == 0.0);
  CHECK(differ > 1e-3);
}

TEST_CASE("CUDA: PeakMemory reads the caching allocator's statistics", "[cuda][memory]") {
  if (!have_cuda()) return;
  const c10::Device device(c10::DeviceType::CUDA, 0);
  REQUIRE(ftopt::memory::PeakMemory::supported(device));
  ftopt::memory::PeakMemory::reset(device);
  {
    auto big = torch::empty({1024, 1024}, torch::TensorOptions().device(device));  // 4 MiB
  }
  CHECK(ftopt::memory::PeakMemory::peak(device) >= (4u << 20));
  ftopt::memory::PeakMemory::reset(device);
  CHECK(ftopt::memory::PeakMemory::peak(device) == 0);
}

TEST_CASE("CUDA: pin_memory and to_device deliver pinned, then device batches", "[cuda][pipeline]") {
  if (!have_cuda()) return;
  using namespace ftopt::pipeline;
  auto images = torch::randint(0, 256, {8, 1, 4, 4}, torch::kByte);
  auto pinned = from(images, torch::arange(8)) | batch(4) | prefetch({.workers = 1}) | pin_memory();
  for (const auto& [x, y] : pinned) CHECK(x.is_pinned());
  auto on_device = from(images, torch::arange(8)) | batch(4) | prefetch({.workers = 1}) | pin_memory() |
                   to_device(torch::kCUDA) | device_augment({.mean = {0.5}, .std = {0.5}});
  std::vector<torch::Tensor> got;
  for (const auto& [x, y] : on_device) {
    CHECK(x.is_cuda());
    got.push_back(x.cpu());
  }
  CHECK(torch::allclose(torch::cat(got), (images.to(torch::kFloat) / 255 - 0.5) / 0.5, 1e-6, 1e-6));
}

TEST_CASE("CUDA: Trainer<Fp16Mixed> trains under fp16 autocast with dynamic loss scaling", "[cuda][fp16]") {
  if (!have_cuda()) return;
  // The same model and data under Fp32 and Fp16Mixed: fp16 losses track fp32's (autocast keeps
  // the loss and the weights in fp32), and the loss falls.
  auto batches = ftopt::test::random_batches(20, 32);
  auto run = [&](auto trainer) {
    auto model = ftopt::test::small_mlp(3);
    torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
    return trainer.fit(model, optimizer, batches);
  };
  ftopt::TrainerOptions options{.epochs = 3, .device = torch::Device(torch::kCUDA), .report_hardware = false};
  const auto fp32 = run(ftopt::Trainer<>(options));
  const auto fp16 = run(ftopt::Trainer<ftopt::precision::Fp16Mixed>(options));
  CHECK(fp16.epochs.back().loss < fp16.epochs.front().loss);
  CHECK(fp16.epochs.back().loss == Approx(fp32.epochs.back().loss).epsilon(0.02));
  CHECK(fp16.epochs.front().skipped_steps <= 1);  // at most the first scale's overflow
  CHECK(fp16.epochs.back().peak_memory > 0);      // from the caching allocator
}
