// pipeline/text.hpp: texts through shuffle, tokenize and pad_batch, on the consumer's thread and
// prefetched, and the stage-order sentences (compile_fail/pipeline_tokenize_order.cpp).
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <ftopt/pipeline.hpp>
#include <ftopt/pipeline/text.hpp>

#include "../support.hpp"

using namespace ftopt;
namespace fp = ftopt::pipeline;

namespace {
text::BertTokenizer small_tokenizer() {
  return text::BertTokenizer(text::WordPiece({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "c"}));
}
data::TextSet letters() {
  return {.texts = {"a", "a b", "a b c", "c", "b b b b b b"}, .labels = {0, 1, 0, 1, 1}, .classes = {"x", "y"},
          .sources = {"1", "2", "3", "4", "5"}};
}
} // namespace

TEST_CASE("pipeline: tokenize and pad_batch pad each batch to its longest", "[pipeline]") {
  const auto tok = small_tokenizer();
  auto batches = fp::from(letters()) | fp::tokenize(tok, {.max_length = 6}) | fp::pad_batch(2, tok.pad_id());
  std::vector<fp::Batch> seen;
  for (auto b : batches) seen.push_back(b);
  REQUIRE(seen.size() == 3);
  // "a", "a b": [CLS] a [SEP] and [CLS] a b [SEP], padded to 4
  CHECK(torch::equal(seen[0].first, torch::tensor({{{2, 4, 3, 0}, {1, 1, 1, 0}}, {{2, 4, 5, 3}, {1, 1, 1, 1}}})));
  CHECK(torch::equal(seen[0].second, torch::tensor({0, 1})));
  CHECK(seen[1].first.size(2) == 5);
  // "b b b b b b" truncated to 6: [CLS] b b b b [SEP]
  CHECK(torch::equal(seen[2].first, torch::tensor({{{2, 5, 5, 5, 5, 3}, {1, 1, 1, 1, 1, 1}}})));
  CHECK(batches.stats()->samples == 5);
}

TEST_CASE("pipeline: texts shuffle, and prefetch on workers gives the same batches", "[pipeline]") {
  const auto tok = small_tokenizer();
  auto prep = fp::shuffle(3) | fp::tokenize(tok) | fp::pad_batch(2);
  auto here = fp::from(letters()) | prep;
  auto there = fp::from(letters()) | prep | fp::prefetch({.workers = 2, .depth = 2});
  std::vector<fp::Batch> a, b;
  for (auto x : here) a.push_back(x);
  for (auto x : there) b.push_back(x);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(torch::equal(a[i].first, b[i].first));
    CHECK(torch::equal(a[i].second, b[i].second));
  }
  std::multiset<std::int64_t> labels;
  for (const auto& x : a)
    for (std::int64_t i = 0; i < x.second.size(0); ++i) labels.insert(x.second[i].item<std::int64_t>());
  CHECK(labels == std::multiset<std::int64_t>{0, 0, 1, 1, 1});
}
