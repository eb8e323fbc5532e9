// Tests for include/ftopt/data/packing.hpp: documents laid into rows first fit, positions
// starting again at 0 for each, the first label of each and the padding -100; the causal-LM loss
// of the packed rows and its gradients equal those of the same documents padded one per row
// (models::Llama's packed attention: tests/models/llama.cpp; transformers': tests/peer/llama.py).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/data/packing.hpp>
#include <ftopt/loss/causal_lm.hpp>
#include <ftopt/models/llama.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
data::TokenSequence doc(std::vector<std::int64_t> ids) {
  auto labels = ids;
  return {std::move(ids), std::move(labels)};
}
std::vector<std::int64_t> row_of(const at::Tensor& t) {
  const auto c = t.contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}
} // namespace

TEST_CASE("pack_sequences: first fit, positions per document, -100 on each first token and on padding",
          "[data][packing]") {
  const std::vector<data::TokenSequence> docs = {doc({11, 12, 13}), doc({21, 22, 23, 24}), doc({31, 32}),
                                                 doc({41})};
  const auto p = data::pack_sequences(docs, {.length = 6, .pad_id = 9});
  REQUIRE(p.input.sizes() == at::IntArrayRef({2, 3, 6}));
  // Row 0: the first document, then the third (the second does not fit after the first), then the
  // fourth; row 1: the second and padding.
  CHECK(row_of(p.input[0][0]) == std::vector<std::int64_t>{11, 12, 13, 31, 32, 41});
  CHECK(row_of(p.input[0][1]) == std::vector<std::int64_t>{1, 1, 1, 1, 1, 1});
  CHECK(row_of(p.input[0][2]) == std::vector<std::int64_t>{0, 1, 2, 0, 1, 0});
  CHECK(row_of(p.labels[0]) == std::vector<std::int64_t>{-100, 12, 13, -100, 32, -100});
  CHECK(row_of(p.input[1][0]) == std::vector<std::int64_t>{21, 22, 23, 24, 9, 9});
  CHECK(row_of(p.input[1][1]) == std::vector<std::int64_t>{1, 1, 1, 1, 0, 0});
  CHECK(row_of(p.input[1][2]) == std::vector<std::int64_t>{0, 1, 2, 3, 0, 1});
  CHECK(row_of(p.labels[1]) == std::vector<std::int64_t>{-100, 22, 23, 24, -100, -100});
  CHECK(p.tokens == 10);
  CHECK(p.fill() == Approx(10.0 / 12.0));
}

TEST_CASE("pack_sequences: a document longer than a row, or with labels of another length, is an error",
          "[data][packing]") {
  std::vector<data::TokenSequence> docs = {doc({1, 2}), doc({1, 2, 3, 4, 5})};
  CHECK_THAT(test::message_of([&] { data::pack_sequences(docs, {.length = 4}); }),
             Contains("document 1 has 5 tokens, more than a row's 4"));
  docs[1].labels.pop_back();
  CHECK_THAT(test::message_of([&] { data::pack_sequences(docs, {.length = 8}); }),
             Contains("document 1 has 5 ids and 4 labels"));
  CHECK_THAT(test::message_of([&] { data::pack_sequences(docs, {.length = 0}); }), Contains("length must be >= 1, got 0"));
}

TEST_CASE("pack_sequences: the causal-LM loss of packed rows and its gradients equal one document per padded row",
          "[data][packing][models]") {
  models::Llama model(models::LlamaOptions{.vocab_size = 30, .hidden = 16, .intermediate = 24, .layers = 2, .heads = 4,
                                           .kv_heads = 2, .max_position_embeddings = 64});
  std::vector<data::TokenSequence> docs;
  for (const std::int64_t n : {6, 4, 9, 3, 5}) {
    data::TokenSequence d;
    for (std::int64_t i = 0; i < n; ++i) {
      d.ids.push_back((7 * n + 3 * i) % 30);
      d.labels.push_back(i < 2 ? loss::ignore_index : d.ids.back());  // a prompt of two tokens
    }
    docs.push_back(std::move(d));
  }
  auto loss_and_gradients = [&](const at::Tensor& input, const at::Tensor& labels) {
    model->zero_grad();
    const auto loss = loss::causal_lm(model(input), labels);
    loss.backward();
    std::vector<at::Tensor> out = {loss.detach()};
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto packed = data::pack_sequences(docs, {.length = 12, .pad_id = 0});
  CHECK(packed.input.size(0) == 3);
  // One per row, padded on the right to the longest: the batch a user writes without packing.
  auto input = torch::zeros({5, 2, 9}, torch::kLong);
  auto labels = torch::full({5, 9}, loss::ignore_index, torch::kLong);
  for (std::size_t d = 0; d < docs.size(); ++d) {
    const auto n = static_cast<std::int64_t>(docs[d].ids.size());
    input[d][0].narrow(0, 0, n).copy_(torch::tensor(docs[d].ids, torch::kLong));
    input[d][1].narrow(0, 0, n).fill_(1);
    labels[d].narrow(0, 0, n).copy_(torch::tensor(docs[d].labels, torch::kLong));
  }
  const auto a = loss_and_gradients(packed.input, packed.labels);
  const auto b = loss_and_gradients(input, labels);
  REQUIRE(a.size() == b.size());
  CHECK(a[0].item<double>() == Approx(b[0].item<double>()).epsilon(1e-6));
  for (std::size_t i = 1; i < a.size(); ++i) CHECK(torch::allclose(a[i], b[i], 1e-4, 1e-6));
}
