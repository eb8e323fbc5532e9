// Tests for the Pipeline as a whole (<ftopt/pipeline.hpp>): the Trainer trains from one.
#include "stages.hpp"

#include <ftopt/trainer.hpp>

TEST_CASE("The Trainer trains from a Pipeline: sized, re-shuffled per epoch, counted", "[pipeline][trainer]") {
  torch::manual_seed(4);
  auto data = torch::randn({40, 6});
  auto labels = torch::randint(0, 3, {40});
  auto batches = from(data, labels) | shuffle(1) | batch(8) | prefetch({.workers = 2});
  auto model = test::small_mlp();
  // The loss sees each batch's targets: the order the Trainer trained in, epoch by epoch.
  std::vector<torch::Tensor> seen;
  TrainerOptions options = test::quiet({.epochs = 2});
  options.loss = [&seen](const torch::Tensor& out, const torch::Tensor& y) {
    seen.push_back(y.clone());
    return torch::nn::functional::cross_entropy(out, y);
  };
  Trainer<> trainer(options);
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  auto summary = trainer.fit(model, optimizer, batches);
  REQUIRE(seen.size() == 10);
  const auto epoch0 = torch::cat(std::vector<torch::Tensor>(seen.begin(), seen.begin() + 5));
  const auto epoch1 = torch::cat(std::vector<torch::Tensor>(seen.begin() + 5, seen.end()));
  CHECK_FALSE(torch::equal(epoch0, epoch1));  // re-shuffled: another order in epoch 1
  CHECK(torch::equal(std::get<0>(epoch0.sort()), std::get<0>(labels.sort())));  // each epoch: every sample once
  CHECK(torch::equal(std::get<0>(epoch1.sort()), std::get<0>(labels.sort())));
  // The order is the epoch's, not the pass's: epoch 1 again gives epoch 1's order.
  batches.set_epoch(1);
  std::vector<torch::Tensor> again;
  for (auto&& [x, y] : batches) again.push_back(y);
  CHECK(torch::equal(torch::cat(again), epoch1));
  CHECK(summary.epochs.size() == 2);
  CHECK(summary.epochs[1].steps == 5);
  CHECK(summary.epochs[1].samples == 40);
  auto stats = batches.stats();
  CHECK(stats->samples.load() == 120);  // two epochs of fit and the pass above
  CHECK(stats->batches.load() == 15);
  CHECK(stats->wait_fraction() >= 0.0);
  CHECK(stats->wait_fraction() <= 1.0);
}
