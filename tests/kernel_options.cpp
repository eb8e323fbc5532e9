// Tests for include/ftopt/kernel_options.hpp: each of ftopt's kernels and the form Python computes
// give the same values and gradients, chosen where they are used (a model's options, a PEFT
// policy's) and not by process-wide state: twin models with the same weights, each with its own
// choice, run side by side in one process.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/models/llama.hpp>

#include "support.hpp"

using namespace ftopt;

namespace {

/// The ViT of support.hpp's tiny_vit with `kernel` (the same seed: the same weights).
models::ViT vit_with(KernelOptions kernel) {
  torch::manual_seed(41);
  return models::ViT({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = 16, .layers = 2, .heads = 2,
                      .intermediate = 32, .num_labels = 10, .kernel = kernel});
}

/// The logits, then the gradient of every parameter, after a backward of the logits' sum
/// weighted by fixed random values.
std::vector<torch::Tensor> logits_and_gradients(models::ViT& vit, const torch::Tensor& pixels) {
  for (auto& p : vit->parameters()) p.mutable_grad() = torch::Tensor();
  const auto logits = vit->forward(pixels);
  torch::manual_seed(3);
  (logits * torch::randn(logits.sizes())).sum().backward();
  std::vector<torch::Tensor> out{logits.detach()};
  for (auto& p : vit->parameters())
    if (p.grad().defined()) out.push_back(p.grad());
  return out;
}

void check_same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i, (a[i] - b[i]).abs().max().item<double>());
    CHECK(torch::allclose(a[i], b[i], tol, tol));
  }
}

} // namespace

TEST_CASE("A model's KernelOptions choose its kernels, with the same values and gradients", "[kernel_options]") {
  const auto pixels = torch::randn({4, 1, 28, 28});
  auto shipped = vit_with({});
  const auto want = logits_and_gradients(shipped, pixels);
  SECTION("query, key and value one GEMM each") {
    auto separate = vit_with({.shared_input = false});
    check_same(logits_and_gradients(separate, pixels), want, 1e-5);
  }
  SECTION("ATen's fused attention, and the math written out") {
    for (const auto attention : {AttentionKernel::Fused, AttentionKernel::WrittenOut}) {
      auto other = vit_with({.attention = attention});
      check_same(logits_and_gradients(other, pixels), want, 1e-5);
    }
  }
  SECTION("attention's small products through at::matmul") {
    auto matmul = vit_with({.attention = AttentionKernel::WrittenOut, .batched_matmul = false});
    check_same(logits_and_gradients(matmul, pixels), want, 1e-5);
  }
}

TEST_CASE("A PEFT policy's KernelOptions choose the adapter kernel or PEFT's form", "[kernel_options][peft]") {
  // LoRA on query and value with B drawn away from zero, on twin models: the merged-weight GEMM
  // and PEFT's form (the branch added to the base's output) give the same step.
  const auto pixels = torch::randn({4, 1, 28, 28});
  std::vector<std::vector<torch::Tensor>> runs;
  for (const KernelOptions kernel : {KernelOptions{}, KernelOptions{.merged_weight = false},
                                     KernelOptions{.merged_weight = false, .shared_input = false}}) {
    auto vit = vit_with({});
    peft::Lora lora({.r = 4, .alpha = 8, .targets = {"query", "value"}, .kernel = kernel});
    lora.attach(*vit);
    torch::manual_seed(7);
    {
      torch::NoGradGuard no_grad;
      for (auto& [name, branch] : lora.branches()) branch->b()->weight.normal_();
    }
    runs.push_back(logits_and_gradients(vit, pixels));
  }
  check_same(runs[1], runs[0], 1e-5);
  check_same(runs[2], runs[0], 1e-5);
  SECTION("peft::set_kernel changes them after attach") {
    auto vit = vit_with({});
    peft::Lora lora({.r = 4, .alpha = 8, .targets = {"query", "value"}});
    lora.attach(*vit);
    peft::set_kernel(*vit, {.merged_weight = false});
    for (const auto& [name, branch] : lora.branches()) CHECK_FALSE(branch->kernel().merged_weight);
  }
}

TEST_CASE("A Llama's row kernels (RMSNorm, rotary) give the ops' values and gradients, under bf16 autocast too",
          "[kernel_options][llama]") {
  const auto ids = torch::randint(0, 50, {2, 9});
  for (const bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16 autocast" : "float32"));
    std::vector<torch::Tensor> runs[2];
    for (const bool row_kernels : {false, true}) {
      torch::manual_seed(43);
      models::Llama llama({.vocab_size = 50, .hidden = 32, .intermediate = 40, .layers = 2, .heads = 4, .kv_heads = 2,
                           .kernel = {.row_kernels = row_kernels}});
      torch::Tensor logits;
      {
        compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16, bf16);
        logits = llama(ids);
      }
      torch::manual_seed(3);
      (logits.to(torch::kFloat) * torch::randn(logits.sizes())).sum().backward();
      runs[row_kernels].push_back(logits.detach().to(torch::kFloat));
      for (auto& p : llama->parameters()) runs[row_kernels].push_back(p.grad());
    }
    // float32: the same to rounding; bf16: RMSNorm's float32 output may round to the other bf16
    // neighbour, so the difference is relative to each tensor's size, within bf16's 2^-8.
    REQUIRE(runs[0].size() == runs[1].size());
    for (std::size_t i = 0; i < runs[0].size(); ++i) {
      CAPTURE(i);
      CHECK((runs[1][i] - runs[0][i]).norm().item<double>() <=
            (bf16 ? 1e-2 : 1e-5) * runs[0][i].norm().item<double>() + 1e-6);
    }
  }
}

TEST_CASE("A Llama's KernelOptions::isa reaches its row kernels: every copy this CPU runs gives the same logits",
          "[kernel_options][llama]") {
  const auto ids = torch::randint(0, 50, {2, 9});
  std::vector<torch::Tensor> logits;
  for (const auto isa : {CpuIsa::Widest, CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Baseline}) {
    if (!ftopt::detail::cpu_runs(isa)) continue;
    torch::manual_seed(43);
    models::Llama llama({.vocab_size = 50, .hidden = 32, .intermediate = 40, .layers = 2, .heads = 4, .kv_heads = 2,
                         .kernel = {.isa = isa}});
    logits.push_back(llama(ids).detach());
  }
  REQUIRE(logits.size() >= 2);  // Widest and Baseline at least
  // The copies keep their sums in the same 16 lanes: equal up to fused multiply-adds.
  for (const auto& l : logits) CHECK(torch::allclose(l, logits[0], 1e-5, 1e-5));
}
