// Tests for include/ftopt/pipeline/stage.hpp: the stages as range-v3 views, closures composing
// with each other and with range-v3's and std::ranges' adaptors (take, filter, transform).
#include "stages.hpp"

#include <range/v3/view/filter.hpp>
#include <range/v3/view/take.hpp>
#include <range/v3/view/transform.hpp>

#include <ftopt/trainer.hpp>

TEST_CASE("Stages are range-v3 views: closures compose before a source, with each other and with range-v3's",
          "[pipeline][ranges]") {
  using Batches = decltype(numbered(1) | shuffle(1) | batch(4));
  STATIC_REQUIRE(ranges::view_<Batches>);
  STATIC_REQUIRE(std::ranges::view<Batches>);
  STATIC_REQUIRE(std::ranges::input_range<decltype(numbered(1) | batch(4) | prefetch())>);

  // The order shuffle(3) draws for epoch 0, and the batches of 4 it makes, written out here.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  auto order = at::randperm(10, generator, at::TensorOptions().dtype(at::kLong));
  const std::vector<std::int64_t> want(order.data_ptr<std::int64_t>(), order.data_ptr<std::int64_t>() + 10);

  auto prep = shuffle(3) | batch(4);  // no source yet
  auto piped = numbered(10) | prep;
  auto called = prep(numbered(10));
  CHECK(piped.size() == 3);
  CHECK(targets_of(piped) == want);
  CHECK(targets_of(called) == want);

  // A range-v3 adaptor in the closure: the first two batches only.
  auto two = numbered(10) | (shuffle(3) | batch(4) | ranges::views::take(2));
  CHECK(targets_of(two) == std::vector<std::int64_t>(want.begin(), want.begin() + 8));

  // An lvalue source stays usable: the stage holds a copy that shares its tensors.
  const Tensors source = numbered(6);
  auto from_lvalue = source | batch(6);
  CHECK(targets_of(from_lvalue) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(source.size() == 6);
}

TEST_CASE("Range views mix with the stages: range-v3 and std::ranges after them, batch stages after a view",
          "[pipeline][ranges]") {
  // Batches of 3 over 0..11 without shuffle: batch k holds 3k, 3k + 1, 3k + 2.
  auto batches = numbered(12) | batch(3) | prefetch({.workers = 2});
  auto odd_first = batches | ranges::views::filter([](const pipeline::Batch& b) { return b.second[0].item<std::int64_t>() % 2 == 1; });
  CHECK(targets_of(odd_first) == std::vector<std::int64_t>{3, 4, 5, 9, 10, 11});

  // A view of batches feeds the batch stages at the end; its place is not known, so to_device takes it.
  auto doubled = batches | ranges::views::transform([](const pipeline::Batch& b) { return pipeline::Batch{b.first * 2, b.second}; }) |
                 to_device(torch::kCPU) | std::views::take(2);
  std::vector<float> values;
  for (const auto& [x, y] : doubled)
    for (std::int64_t i = 0; i < x.size(0); ++i) values.push_back(x[i][0].item<float>());
  CHECK(values == std::vector<float>{0, 2, 4, 6, 8, 10});

  // std::views on a stage directly.
  auto first = numbered(12) | batch(5) | std::views::take(1);
  CHECK(targets_of(first) == std::vector<std::int64_t>{0, 1, 2, 3, 4});

  // The Trainer takes a view of a pipeline: two steps an epoch.
  torch::manual_seed(5);
  auto data = torch::randn({40, 6});
  auto labels = torch::randint(0, 3, {40});
  auto model = test::small_mlp();
  Trainer<> trainer(test::quiet({.epochs = 1}));
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  auto summary = trainer.fit(model, optimizer, from(data, labels) | batch(8) | ranges::views::take(2));
  CHECK(summary.epochs[0].steps == 2);
  CHECK(summary.epochs[0].samples == 16);
}
