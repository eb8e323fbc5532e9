#pragma once
/// Text generation and perplexity for models::Llama, as transformers' generate() and its
/// perplexity recipe compute them:
///   generate(model, prompt, options)  the prompt through the model once, then one token a step
///                                     with the keys and values of the tokens before kept
///                                     (LlamaKvCache); greedy (temperature 0) or sampled from
///                                     softmax(logits / temperature), restricted to the top_k
///                                     tokens and then to the smallest set whose probability
///                                     reaches top_p (transformers' warpers, in that order), with
///                                     a seeded generator; stops after a token of `stop` (kept).
///   perplexity(model, ids, window)    exp of the mean next-token loss over ids, cut into windows
///                                     of `window` tokens that each start without context.
/// Both run in eval mode without gradients and leave the model's mode as it was.
///
///   auto ids = ftopt::models::generate(*llm, prompt, {.max_new_tokens = 32, .stop = {2}});

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include <ftopt/detail/eval_scope.hpp>
#include <ftopt/error.hpp>
#include <ftopt/loss/causal_lm.hpp>
#include <ftopt/models/llama.hpp>

namespace ftopt::models {

struct GenerateOptions {
  std::int64_t max_new_tokens = 64;
  double temperature = 0.0;  ///< 0: greedy (transformers' do_sample=False)
  std::int64_t top_k = 0;    ///< 0: every token
  double top_p = 1.0;        ///< 1: no nucleus cut
  std::uint64_t seed = 0;    ///< the sampling generator's seed
  std::vector<std::int64_t> stop;  ///< tokens that end the answer (EOS, <|im_end|>); kept in it

  void validate() const {
    check(max_new_tokens >= 1, "GenerateOptions: max_new_tokens must be >= 1, got ", max_new_tokens);
    check(temperature >= 0, "GenerateOptions: temperature must be >= 0, got ", temperature);
    check(top_k >= 0, "GenerateOptions: top_k must be >= 0, got ", top_k);
    check(top_p > 0 && top_p <= 1, "GenerateOptions: top_p must be in (0, 1], got ", top_p);
  }
};

namespace detail {
/// The next token from the last position's logits [V].
inline std::int64_t next_token(at::Tensor logits, const GenerateOptions& o, at::Generator& generator) {
  if (o.temperature == 0.0) return logits.argmax().item<std::int64_t>();
  logits = logits.to(at::kFloat) / o.temperature;
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    const at::Tensor kth = std::get<0>(logits.topk(o.top_k)).min();
    logits = logits.masked_fill(logits < kth, -INFINITY);
  }
  if (o.top_p < 1.0) {  // transformers' TopPLogitsWarper: drop the low tail whose mass is <= 1 - top_p
    const auto [sorted, order] = logits.sort(/*stable=*/false, /*dim=*/0, /*descending=*/false);
    at::Tensor drop = sorted.softmax(0).cumsum(0) <= (1.0 - o.top_p);
    drop[-1] = false;  // always keep the most likely token
    logits = logits.scatter(0, order, sorted.masked_fill(drop, -INFINITY));
  }
  return at::multinomial(logits.softmax(0), 1, /*replacement=*/false, generator).item<std::int64_t>();
}
} // namespace detail

/// The prompt's continuation: up to max_new_tokens ids, ending at the first `stop` token.
inline std::vector<std::int64_t> generate(LlamaImpl& model, std::span<const std::int64_t> prompt,
                                          const GenerateOptions& options = {}) {
  options.validate();
  const auto limit = model.options().max_position_embeddings;
  const auto length = static_cast<std::int64_t>(prompt.size());
  check(length >= 1, "models::generate: the prompt is empty");
  check(length + options.max_new_tokens <= limit, "models::generate: a prompt of ", length, " tokens and ",
        options.max_new_tokens, " new ones exceed the model's context of ", limit,
        " (max_position_embeddings); shorten the prompt or ask for fewer tokens");
  const ftopt::detail::EvalScope eval(model);
  torch::NoGradGuard no_grad;
  const auto device = model.head_weight().device();
  at::Generator generator = at::detail::createCPUGenerator(options.seed);
  LlamaKvCache cache = LlamaImpl::cache(length + options.max_new_tokens);
  at::Tensor ids = at::tensor(std::vector<std::int64_t>(prompt.begin(), prompt.end()), at::kLong).view({1, -1});
  std::vector<std::int64_t> out;
  for (std::int64_t step = 0; step < options.max_new_tokens; ++step) {
    // The head on the last position only: the prompt's other positions predict nothing asked for.
    const at::Tensor last = model.model->forward_cached(ids.to(device), cache).select(1, -1);
    const std::int64_t token = detail::next_token(model.logits(last)[0].cpu(), options, generator);
    out.push_back(token);
    if (std::find(options.stop.begin(), options.stop.end(), token) != options.stop.end()) break;
    ids = at::full({1, 1}, token, at::kLong);
  }
  return out;
}

/// exp(mean next-token loss) over ids, in windows of `window` tokens.
inline double perplexity(LlamaImpl& model, std::span<const std::int64_t> ids, std::int64_t window = 512) {
  check(window >= 2 && window <= model.options().max_position_embeddings, "models::perplexity: window must be in "
        "2..", model.options().max_position_embeddings, " (max_position_embeddings), got ", window);
  check(ids.size() >= 2, "models::perplexity: ", ids.size(), " tokens predict nothing; give at least 2");
  const ftopt::detail::EvalScope eval(model);
  torch::NoGradGuard no_grad;
  const auto device = model.head_weight().device();
  const at::Tensor all = at::tensor(std::vector<std::int64_t>(ids.begin(), ids.end()), at::kLong);
  double total = 0;
  std::int64_t predicted = 0;
  for (std::int64_t start = 0; start + 1 < all.size(0); start += window) {
    const at::Tensor chunk = all.narrow(0, start, std::min(window, all.size(0) - start)).view({1, -1}).to(device);
    if (chunk.size(1) < 2) break;
    const auto n = chunk.size(1) - 1;
    total += loss::causal_lm(model.logits(model.hidden(chunk)), chunk).item<double>() * static_cast<double>(n);
    predicted += n;
  }
  return std::exp(total / static_cast<double>(predicted));
}

} // namespace ftopt::models
