// Tests for include/ftopt/data/subsets.hpp.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/data/subsets.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {
data::LabelledImages toy() {
  auto labels = torch::tensor({0, 5, 1, 9, 5, 0, 9, 1}, torch::kLong);
  return {labels.to(torch::kByte).view({8, 1, 1}).repeat({1, 2, 2}), labels};
}
} // namespace

TEST_CASE("first keeps the first n samples, 0 or more than there are keeps all", "[data]") {
  auto three = data::first(toy(), 3);
  CHECK(torch::equal(three.labels, torch::tensor({0, 5, 1}, torch::kLong)));
  CHECK(torch::equal(three.images.select(1, 0).select(1, 0).to(torch::kLong), torch::tensor({0, 5, 1}, torch::kLong)));
  CHECK(data::first(toy(), 0).labels.size(0) == 8);
  CHECK(data::first(toy(), 100).labels.size(0) == 8);
  CHECK_THAT(test::message_of([] { data::first(toy(), -1); }), Catch::Contains("sample count must be >= 0, got -1"));
}

TEST_CASE("select_classes keeps and renumbers the chosen classes", "[data]") {
  auto part = data::select_classes(toy(), {5, 9});
  CHECK(torch::equal(part.labels, torch::tensor({0, 1, 0, 1}, torch::kLong)));
  CHECK(torch::equal(part.images.select(1, 0).select(1, 0).to(torch::kLong), torch::tensor({5, 9, 5, 9}, torch::kLong)));
  auto kept = data::select_classes(toy(), {9, 0}, /*relabel=*/false);
  CHECK(torch::equal(kept.labels, torch::tensor({0, 9, 0, 9}, torch::kLong)));
  CHECK_THAT(test::message_of([] { data::select_classes(toy(), {3}); }), Catch::Contains("class 3 has no samples"));
  CHECK_THAT(test::message_of([] { data::select_classes(toy(), {1, 1}); }), Catch::Contains("listed twice"));
}

TEST_CASE("split is a seeded partition", "[data]") {
  auto [rest, held] = data::split(toy(), 0.25, 3);
  CHECK(held.labels.size(0) == 2);
  CHECK(rest.labels.size(0) == 6);
  auto all = std::get<0>(torch::cat({rest.labels, held.labels}).sort());
  CHECK(torch::equal(all, std::get<0>(toy().labels.sort())));
  auto [rest2, held2] = data::split(toy(), 0.25, 3);
  CHECK(torch::equal(held.labels, held2.labels));
  CHECK_THAT(test::message_of([] { data::split(toy(), 1.5, 0); }), Catch::Contains("fraction must be in (0, 1), got 1.5"));
}
