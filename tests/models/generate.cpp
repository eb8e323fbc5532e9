// Tests for include/ftopt/models/generate.hpp: cached decoding equal to running the whole sequence
// again each step (the definition), greedy as the argmax of that, seeded sampling repeatable and
// equal to greedy where top_k or top_p leave one token, and perplexity as exp of the mean loss.
// Greedy decoding of the real SmolLM2 against transformers' generate: tests/peer/llama.py.
#include <catch2/catch.hpp>

#include <cmath>

#include <torch/torch.h>

#include <ftopt/loss/causal_lm.hpp>
#include <ftopt/models/generate.hpp>
#include <ftopt/models/llama.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
models::Llama small() {
  torch::manual_seed(8);
  return models::Llama({.vocab_size = 60, .hidden = 32, .intermediate = 48, .layers = 2, .heads = 4, .kv_heads = 2,
                        .max_position_embeddings = 40});
}
} // namespace

TEST_CASE("generate: cached steps give the logits of the whole sequence", "[models][generate]") {
  auto model = small();
  model->eval();
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(0, 60, {2, 11}, torch::kLong);
  const auto whole = model(ids);
  auto cache = models::LlamaImpl::cache(16);
  const auto prefill = model->forward_cached(ids.slice(1, 0, 6), cache);
  const auto two = model->forward_cached(ids.slice(1, 6, 8), cache);  // several new tokens at once
  std::vector<torch::Tensor> steps = {prefill, two};
  for (std::int64_t t = 8; t < 11; ++t) steps.push_back(model->forward_cached(ids.slice(1, t, t + 1), cache));
  CHECK(cache.length == 11);
  CHECK(torch::allclose(torch::cat(steps, 1), whole, 1e-5, 1e-5));
  CHECK_THAT(test::message_of([&] { model->forward_cached(ids.slice(1, 0, 6), cache); }),
             Contains("17 tokens do not fit the cache's capacity of 16"));
}

TEST_CASE("generate: greedy is the argmax of the full forward, step by step, up to a stop token", "[models][generate]") {
  auto model = small();
  const std::vector<std::int64_t> prompt = {5, 17, 3, 42};
  const auto got = models::generate(*model, prompt, {.max_new_tokens = 12});
  REQUIRE(got.size() == 12);
  CHECK(model->is_training());  // its mode is given back
  std::vector<std::int64_t> sequence = prompt;
  {
    model->eval();
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const auto logits = model(torch::tensor(sequence, torch::kLong).view({1, -1}));
      const auto next = logits[0][-1].argmax().item<std::int64_t>();
      CHECK(got[i] == next);
      sequence.push_back(next);
    }
    model->train();
  }
  const auto stop = got[5];
  const auto stopped = models::generate(*model, prompt, {.max_new_tokens = 12, .stop = {stop}});
  const auto first = std::find(got.begin(), got.end(), stop);  // up to its first appearance, kept
  CHECK(stopped == std::vector<std::int64_t>(got.begin(), first + 1));
}

TEST_CASE("generate: sampling repeats with its seed, and top_k = 1 or a tiny top_p is greedy", "[models][generate]") {
  auto model = small();
  const std::vector<std::int64_t> prompt = {1, 2, 3};
  const auto greedy = models::generate(*model, prompt, {.max_new_tokens = 10});
  const auto a = models::generate(*model, prompt, {.max_new_tokens = 10, .temperature = 1.5, .seed = 4});
  const auto b = models::generate(*model, prompt, {.max_new_tokens = 10, .temperature = 1.5, .seed = 4});
  const auto c = models::generate(*model, prompt, {.max_new_tokens = 10, .temperature = 1.5, .seed = 5});
  CHECK(a == b);
  CHECK(a != c);
  CHECK(models::generate(*model, prompt, {.max_new_tokens = 10, .temperature = 0.7, .top_k = 1, .seed = 9}) == greedy);
  CHECK(models::generate(*model, prompt, {.max_new_tokens = 10, .temperature = 0.7, .top_p = 1e-6, .seed = 9}) ==
        greedy);
  CHECK_THAT(test::message_of([&] { models::generate(*model, std::vector<std::int64_t>(35, 1), {.max_new_tokens = 6}); }),
             Contains("a prompt of 35 tokens and 6 new ones exceed the model's context of 40"));
  CHECK_THAT(test::message_of([&] { models::generate(*model, prompt, {.top_p = 0}); }),
             Contains("top_p must be in (0, 1], got 0"));
}

TEST_CASE("perplexity: exp of the mean next-token loss, window by window", "[models][generate]") {
  auto model = small();
  std::vector<std::int64_t> ids(25);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 7) % 60);
  const auto all = torch::tensor(ids, torch::kLong).view({1, -1});
  double nll = 0;
  {
    model->eval();
    torch::NoGradGuard no_grad;
    // Windows of 10: tokens 0-9, 10-19, 20-24, each predicting its own next tokens (9, 9, 4).
    for (const auto& [start, n] : std::vector<std::pair<int, int>>{{0, 10}, {10, 10}, {20, 5}}) {
      const auto w = all.slice(1, start, start + n);
      nll += loss::causal_lm(model(w), w).item<double>() * (n - 1);
    }
    model->train();
  }
  CHECK(models::perplexity(*model, ids, 10) == Approx(std::exp(nll / 22)).epsilon(1e-5));
}
