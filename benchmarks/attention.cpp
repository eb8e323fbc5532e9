// Attention's small batched products on the CPU: at::matmul (on Debian's 1.13 over OpenBLAS, a
// BLAS call per batch item) against ftopt::detail::batched_matmul's AVX2/FMA kernel, forward and
// backward, side by side in one process, one thread (counters: median of each, and the ratio).
//
//   build/benchmarks/bench_attention --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// The first cases are the main job's ViT (batch 128, 4 heads, 50 tokens of 16 dims): the score
// product q k^T, the weighted sum P v, then the whole of nn::scaled_dot_product_attention and
// a whole training step of the ViT (forward, backward, AdamW), each with batched_matmul switched
// off and on (on LibTorch 2.x the attention is ATen's fused SDPA either way). The last ones sit
// above batched_matmul's size limit (64^3 per item and more), calling the kernel directly, to
// show why it stops there.

#include <cstdint>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <ftopt/detail/batched_matmul.hpp>
#include <ftopt/detail/compat.hpp>
#include <ftopt/models/vit.hpp>
#include <ftopt/nn/attention.hpp>

#include "machine.hpp"
#include "side_by_side.hpp"

namespace {

/// One forward and backward of c = product(a, b).
template <class Product>
void step(Product product, const torch::Tensor& a, const torch::Tensor& b) {
  auto c = product(a, b);
  torch::autograd::grad({c}, {a, b}, {torch::ones_like(c)});
}

void compare_products(benchmark::State& state, std::int64_t items, std::int64_t m, std::int64_t k, std::int64_t n) {
  at::set_num_threads(1);
  torch::manual_seed(0);
  auto a = torch::randn({items, m, k}, torch::requires_grad()), b = torch::randn({items, k, n}, torch::requires_grad());
  const auto kernel = [](const at::Tensor& x, const at::Tensor& y) {
    return ftopt::detail::batched_matmul_kernel::Function::apply(x, y);
  };
  ftopt::bench::side_by_side(state, {{"at_matmul", [&] { step([](auto& x, auto& y) { return at::matmul(x, y); }, a, b); }},
                                     {"ftopt", [&] { step(kernel, a, b); }}});
  state.counters["applies"] = ftopt::detail::batched_matmul_applies(a, b);
}

void BM_ViTScores(benchmark::State& state) { compare_products(state, 512, 50, 16, 50); }  // q k^T
void BM_ViTWeightedSum(benchmark::State& state) { compare_products(state, 512, 50, 50, 16); }  // P v
void BM_Item64Cubed(benchmark::State& state) { compare_products(state, 64, 64, 64, 64); }
void BM_Item128Cubed(benchmark::State& state) { compare_products(state, 16, 128, 128, 128); }

void BM_ViTAttention(benchmark::State& state) {
  at::set_num_threads(1);
  torch::manual_seed(0);
  auto make = [] { return torch::randn({128, 4, 50, 16}, torch::requires_grad()); };
  auto q = make(), k = make(), v = make();
  auto run = [&](bool kernel) {
    auto out = ftopt::nn::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, {.batched_matmul = kernel});
    torch::autograd::grad({out}, {q, k, v}, {torch::ones_like(out)});
  };
  ftopt::bench::side_by_side(state, {{"at_matmul", [&] { run(false); }}, {"ftopt", [&] { run(true); }}});
}

/// One training step of the main job's ViT (patch 4 on 28x28: 50 tokens; d 64, 4 heads, MLP
/// 128) on a batch of 128, layers as the state's argument.
void BM_ViTTrainStep(benchmark::State& state) {
  at::set_num_threads(1);
  const auto model = [&](bool kernel) {
    torch::manual_seed(0);
    return ftopt::models::ViT({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 64,
                               .layers = state.range(0), .heads = 4, .intermediate = 128, .num_labels = 10,
                               .kernel = {.batched_matmul = kernel}});
  };
  ftopt::models::ViT with_matmul = model(false), with_kernel = model(true);  // the same weights
  torch::optim::AdamW matmul_optimizer(with_matmul->parameters(), torch::optim::AdamWOptions(1e-3));
  torch::optim::AdamW kernel_optimizer(with_kernel->parameters(), torch::optim::AdamWOptions(1e-3));
  auto images = torch::randn({128, 1, 28, 28});
  auto labels = torch::randint(10, {128});
  auto train_step = [&](ftopt::models::ViT& vit, torch::optim::AdamW& optimizer) {
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(vit->forward(images), labels).backward();
    optimizer.step();
  };
  ftopt::bench::side_by_side(state, {{"at_matmul", [&] { train_step(with_matmul, matmul_optimizer); }},
                                     {"ftopt", [&] { train_step(with_kernel, kernel_optimizer); }}});
}

} // namespace

BENCHMARK(BM_ViTTrainStep)->Arg(4)->Arg(6)->Unit(benchmark::kMillisecond)->Iterations(30);
BENCHMARK(BM_ViTScores)->Unit(benchmark::kMillisecond)->Iterations(50);
BENCHMARK(BM_ViTWeightedSum)->Unit(benchmark::kMillisecond)->Iterations(50);
BENCHMARK(BM_ViTAttention)->Unit(benchmark::kMillisecond)->Iterations(50);
BENCHMARK(BM_Item64Cubed)->Unit(benchmark::kMillisecond)->Iterations(50);
BENCHMARK(BM_Item128Cubed)->Unit(benchmark::kMillisecond)->Iterations(50);
FTOPT_BENCHMARK_MAIN();
