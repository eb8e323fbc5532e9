// Tests for include/ftopt/data/tensor_batches.hpp.
#include <catch2/catch.hpp>

#include <ranges>
#include <set>

#include <torch/torch.h>

#include <ftopt/batch.hpp>
#include <ftopt/data/tensor_batches.hpp>

using ftopt::data::TensorBatches;

static_assert(ftopt::BatchRange<TensorBatches&>);
static_assert(std::ranges::sized_range<TensorBatches>);

namespace {
std::vector<std::int64_t> targets_of_pass(const TensorBatches& batches) {
  std::vector<std::int64_t> seen;
  for (auto [x, y] : batches) {
    REQUIRE(torch::equal(x.select(1, 0), y.to(torch::kFloat)));  // rows stay with their labels
    for (std::int64_t i = 0; i < y.size(0); ++i) seen.push_back(y[i].item<std::int64_t>());
  }
  return seen;
}
} // namespace

TEST_CASE("TensorBatches visits every sample once per pass, reshuffled, reproducibly", "[data]") {
  auto targets = torch::arange(10, torch::kLong);
  auto inputs = targets.to(torch::kFloat).unsqueeze(1).repeat({1, 3});
  TensorBatches batches(inputs, targets, {.batch_size = 4, .seed = 7});
  CHECK(batches.size() == 3);
  auto first = targets_of_pass(batches);
  auto second = targets_of_pass(batches);
  CHECK(std::set<std::int64_t>(first.begin(), first.end()).size() == 10);
  CHECK(first.size() == 10);
  CHECK(first != second);  // a new permutation each pass

  TensorBatches again(inputs, targets, {.batch_size = 4, .seed = 7});
  CHECK(targets_of_pass(again) == first);  // same seed, same order
}

TEST_CASE("TensorBatches keeps order without shuffle and can drop the last batch", "[data]") {
  auto targets = torch::arange(10, torch::kLong);
  auto inputs = targets.to(torch::kFloat).unsqueeze(1);
  TensorBatches in_order(inputs, targets, {.batch_size = 4, .shuffle = false});
  auto seen = targets_of_pass(in_order);
  CHECK(seen == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  TensorBatches dropped(inputs, targets, {.batch_size = 4, .shuffle = false, .drop_last = true});
  CHECK(dropped.size() == 2);
  CHECK(targets_of_pass(dropped).size() == 8);
}

TEST_CASE("TensorBatches rejects bad settings with the value", "[data][errors]") {
  auto x = torch::zeros({4, 2});
  CHECK_THROWS_WITH(TensorBatches(x, torch::zeros({4}), {.batch_size = 0}),
                    Catch::Contains("batch_size must be >= 1, got 0"));
  CHECK_THROWS_WITH(TensorBatches(x, torch::zeros({3})),
                    Catch::Contains("same first dimension, got [4, 2] and [3]"));
}
