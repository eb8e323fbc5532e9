// Tests for include/ftopt/trainer/metrics.hpp: the epoch statistics add up.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

TEST_CASE("Epoch statistics add up", "[trainer]") {
  auto batches = test::random_batches(5, 8);
  auto model = test::small_mlp();
  Trainer<> trainer(quiet());
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  // Loss and accuracy of each batch are measured before its own update, as fit records them.
  double loss_sum = 0, correct = 0;
  {
    auto probe = test::small_mlp();
    torch::optim::SGD probe_opt(probe->parameters(), torch::optim::SGDOptions(0.1));
    for (auto& [x, y] : batches) {
      probe_opt.zero_grad();
      auto out = probe->forward(x);
      auto loss = torch::nn::functional::cross_entropy(out, y);
      loss_sum += loss.item<double>() * 8;
      correct += out.argmax(1).eq(y).sum().item<double>();
      loss.backward();
      probe_opt.step();
    }
  }
  auto stats = trainer.fit(model, optimizer, batches).epochs.at(0);
  CHECK(stats.samples == 40);
  CHECK(stats.loss == Approx(loss_sum / 40).epsilon(1e-6));
  REQUIRE(stats.accuracy.has_value());
  CHECK(*stats.accuracy == Approx(correct / 40));
  const auto& p = stats.phases;
  CHECK(p.data >= 0);
  CHECK(p.forward > 0);
  CHECK(p.backward > 0);
  CHECK(p.optimizer > 0);
  CHECK(p.data + p.forward + p.backward + p.optimizer <= stats.seconds);
  CHECK(stats.samples_per_second == Approx(40 / stats.seconds));
}
