// Tests for include/ftopt/loss/causal_lm.hpp: the shifted, -100-masked mean cross-entropy written
// out here as transformers' ForCausalLMLoss computes it, and the fused linear cross-entropy equal
// to it over materialized logits, values and gradients, for every chunk size and under autocast.
// Against F.cross_entropy in Python: tests/peer/llama.py.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/loss/causal_lm.hpp>
#include <ftopt/models/llama.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
/// F.cross_entropy over materialized logits, -100 ignored: what the fused loss must equal.
torch::Tensor materialized_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return torch::nn::functional::cross_entropy(logits, labels,
                                              torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
}
} // namespace

TEST_CASE("causal_lm: logit t predicts label t + 1, -100 is ignored, the mean is over the rest", "[loss]") {
  const auto logits = torch::randn({2, 4, 6});
  const auto labels = torch::tensor({{3, 1, -100, 5}, {-100, 0, 2, -100}}, torch::kLong);
  // Predicted pairs (row, t -> label t+1): (0,0->1) (0,2->5) (1,0->0) (1,1->2); (0,1) is -100.
  double sum = 0;
  for (const auto& [b, t, y] : std::vector<std::array<int, 3>>{{0, 0, 1}, {0, 2, 5}, {1, 0, 0}, {1, 1, 2}})
    sum += -torch::log_softmax(logits[b][t], 0)[y].item<double>();
  CHECK(loss::causal_lm(logits, labels).item<double>() == Approx(sum / 4).epsilon(1e-6));
  CHECK(loss::causal_lm(logits.to(torch::kBFloat16), labels).scalar_type() == torch::kFloat);
  CHECK_THAT(test::message_of([&] { loss::causal_lm(logits, labels.slice(1, 1)); }),
             Contains("logits [2, 4, 6] do not match labels [2, 3]"));
}

TEST_CASE("linear_cross_entropy: the loss and gradients of materialized logits, tile by tile", "[loss]") {
  const auto h0 = torch::randn({11, 8}), w0 = torch::randn({30, 8}) * 0.5;
  auto labels = torch::randint(0, 30, {11}, torch::kLong);
  labels[2] = labels[7] = -100;
  auto h_ref = h0.clone().requires_grad_(true), w_ref = w0.clone().requires_grad_(true);
  const auto want = materialized_loss(torch::matmul(h_ref, w_ref.t()), labels);
  (want * 3).backward();
  for (const std::int64_t chunk : {1, 4, 11, 64}) {
    INFO("chunk " << chunk);
    auto h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const auto got = loss::linear_cross_entropy(h, w, labels, chunk);
    CHECK(got.item<double>() == Approx(want.item<double>()).epsilon(1e-6));
    (got * 3).backward();
    CHECK(torch::allclose(h.grad(), h_ref.grad(), 1e-5, 1e-6));
    CHECK(torch::allclose(w.grad(), w_ref.grad(), 1e-5, 1e-6));
  }
  {
    // More rows than one pass over the weight takes, and the vocabulary in tiles of 1 to 7 columns.
    const std::int64_t N = 2 * loss::detail::rows_per_pass + 37;
    const auto hn = torch::randn({N, 4}), wn = torch::randn({7, 4});
    auto yn = torch::randint(0, 7, {N}, torch::kLong);
    yn.slice(0, 100, 2100).fill_(-100);
    auto hn_ref = hn.clone().requires_grad_(true), wn_ref = wn.clone().requires_grad_(true);
    const auto expected = materialized_loss(torch::matmul(hn_ref, wn_ref.t()), yn);
    expected.backward();
    for (const std::int64_t chunk : {1, 900, 4096}) {
      INFO("chunk " << chunk);
      auto h = hn.clone().requires_grad_(true), w = wn.clone().requires_grad_(true);
      const auto got = loss::linear_cross_entropy(h, w, yn, chunk);
      CHECK(got.item<double>() == Approx(expected.item<double>()).epsilon(1e-5));
      got.backward();
      CHECK(torch::allclose(h.grad(), hn_ref.grad(), 1e-4, 1e-7));
      CHECK(torch::allclose(w.grad(), wn_ref.grad(), 1e-4, 1e-6));
      // A frozen head: the one sweep with the running maximum.
      auto h_only = hn.clone().requires_grad_(true);
      const auto frozen = loss::linear_cross_entropy(h_only, wn, yn, chunk);
      CHECK(frozen.item<double>() == Approx(expected.item<double>()).epsilon(1e-5));
      frozen.backward();
      CHECK(torch::allclose(h_only.grad(), hn_ref.grad(), 1e-4, 1e-7));
    }
  }
  // A frozen head (tied embeddings under LoRA) gets no gradient and costs none; its one sweep
  // gives the same loss and gradient, for every tile width, logits far apart included (the
  // running maximum rescales what came before).
  for (const std::int64_t chunk : {1, 4, 11, 64}) {
    INFO("frozen head, chunk " << chunk);
    auto h = h0.clone().requires_grad_(true);
    const auto got = loss::linear_cross_entropy(h, w0, labels, chunk);
    CHECK(got.item<double>() == Approx(want.item<double>()).epsilon(1e-6));
    (got * 3).backward();
    CHECK(torch::allclose(h.grad(), h_ref.grad(), 1e-5, 1e-6));
    CHECK_FALSE(w0.grad().defined());
  }
  {
    auto w_spread = w0.clone();
    w_spread.slice(0, 20, 30).mul_(40);  // the last tiles' logits dwarf the first ones'
    auto h_ref2 = h0.clone().requires_grad_(true), h = h0.clone().requires_grad_(true);
    const auto want2 = materialized_loss(torch::matmul(h_ref2, w_spread.t()), labels);
    want2.backward();
    const auto got = loss::linear_cross_entropy(h, w_spread, labels, 1);
    CHECK(got.item<double>() == Approx(want2.item<double>()).epsilon(1e-6));
    got.backward();
    CHECK(torch::allclose(h.grad(), h_ref2.grad(), 1e-5, 1e-6));
  }
  // Every label ignored: 0, as a mean over nothing that trains nothing.
  auto none = h0.clone().requires_grad_(true);
  const auto zero = loss::linear_cross_entropy(none, w0, torch::full({11}, -100, torch::kLong));
  zero.backward();
  CHECK(zero.item<double>() == 0.0);
  CHECK(none.grad().abs().sum().item<double>() == 0.0);
  CHECK_THAT(test::message_of([&] { loss::linear_cross_entropy(h0, w0, torch::full({11}, 30, torch::kLong)); }),
             Contains("label 30 is outside the vocabulary of 30 (and not -100)"));
  CHECK_THAT(test::message_of([&] { loss::linear_cross_entropy(h0, w0.t(), labels); }),
             Contains("hidden [11, 8], weight [8, 30] and labels [11] are not [N, H], [V, H] and [N]"));
}

TEST_CASE("fused_causal_lm: a Llama's hidden states and head give causal_lm of its logits, under bf16 autocast too",
          "[loss][llama]") {
  models::Llama model({.vocab_size = 64, .hidden = 32, .intermediate = 48, .layers = 1, .heads = 4, .kv_heads = 2});
  const auto ids = torch::randint(0, 64, {2, 7}, torch::kLong);
  auto labels = ids.clone();
  labels[0].slice(0, 0, 3).fill_(-100);  // a prompt
  const auto fused = loss::fused_causal_lm([&] { return model->head_weight(); }, 5);
  for (const bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16 autocast" : "float32"));
    std::vector<torch::Tensor> grads[2];
    torch::Tensor values[2];
    for (const bool use_fused : {false, true}) {
      model->zero_grad();
      model->output_hidden = use_fused;
      {
        compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16, bf16);
        values[use_fused] = use_fused ? fused(model(ids), labels) : loss::causal_lm(model(ids), labels);
      }
      values[use_fused].backward();
      for (const auto& p : model->parameters()) grads[use_fused].push_back(p.grad().clone());
    }
    model->output_hidden = false;
    CHECK(values[1].item<double>() == Approx(values[0].item<double>()).epsilon(bf16 ? 1e-2 : 1e-6));
    // bf16 rounds each GEMM's operands (the fused head's weight gradient accumulates in float32,
    // autocast's in bf16): relative to the gradient's size, within bf16's 2^-8 a few times over.
    for (std::size_t i = 0; i < grads[0].size(); ++i)
      CHECK((grads[1][i] - grads[0][i]).norm().item<double>() <=
            (bf16 ? 2e-2 : 1e-5) * grads[0][i].norm().item<double>() + 1e-7);
  }
}

TEST_CASE("linear_cross_entropy under bf16 autocast with a frozen head: causal_lm of the bf16 logits", "[loss]") {
  const auto h0 = torch::randn({300, 64}), w = torch::randn({1000, 64}) * 0.2;
  auto labels = torch::randint(0, 1000, {300}, torch::kLong);
  labels.slice(0, 0, 40).fill_(-100);
  auto h_ref = h0.clone().requires_grad_(true), h = h0.clone().requires_grad_(true);
  torch::Tensor want, got;
  {
    compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    want = materialized_loss(torch::matmul(h_ref, w.t()).to(torch::kFloat), labels);
    got = loss::linear_cross_entropy(h, w, labels, 8);
  }
  want.backward();
  got.backward();
  CHECK(got.scalar_type() == torch::kFloat);
  CHECK(got.item<double>() == Approx(want.item<double>()).epsilon(1e-3));
  // Both round the GEMMs' operands to bf16; the fused one also each tile's softmax before its
  // product with W, autocast's the whole gradient of the logits: within bf16's 2^-8.
  CHECK((h.grad() - h_ref.grad()).norm().item<double>() <= 1e-2 * h_ref.grad().norm().item<double>());
}
