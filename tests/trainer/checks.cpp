// Tests for include/ftopt/trainer/checks.hpp: a NaN loss stops fit naming the step (or is ignored
// when asked), and fit refuses what prepare() did not set up.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::message_of;
using Catch::Matchers::Contains;
using ftopt::test::quiet;

TEST_CASE("A NaN loss stops fit with the step named and the weights kept", "[trainer][errors]") {
  auto batches = test::random_batches(4, 4);
  auto model = test::small_mlp();
  TrainerOptions options = quiet();
  options.loss = test::nan_on_call(3);
  Trainer<> trainer(options);
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  std::vector<torch::Tensor> after_two;
  auto message = message_of([&] { trainer.fit(model, optimizer, batches, test::SnapshotAt{2, model.get(), &after_two}); });
  CHECK_THAT(message, Contains("the loss is nan at epoch 0, step 2") &&
                          Contains("weights are those after optimizer step 2"));
  CHECK(test::same_values(test::snapshot(*model), after_two));
  for (auto& p : model->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("fit refuses a model or optimizer that prepare() did not set up", "[trainer][errors]") {
  auto model = test::small_mlp();
  auto batches = test::random_batches(1, 4);
  Trainer<> trainer(quiet());
  torch::optim::SGD early(model->parameters(), torch::optim::SGDOptions(0.1));
  CHECK_THAT(message_of([&] { trainer.fit(model, early, batches); }),
             Contains("call trainer.prepare(model) first"));

  model->parameters()[0].requires_grad_(false);  // frozen by hand before prepare
  const auto& trainable = trainer.prepare(model);
  CHECK(trainable.size() == 3);
  torch::optim::SGD all(model->parameters(), torch::optim::SGDOptions(0.1));
  CHECK_THAT(message_of([&] { trainer.fit(model, all, batches); }),
             Contains("the optimizer holds 4 parameters, 1 of them not trainable") &&
                 Contains("prepare() returned 3"));

  auto frozen = test::small_mlp();
  for (auto& p : frozen->parameters()) p.requires_grad_(false);
  CHECK_THAT(message_of([&] { Trainer<>(quiet()).prepare(frozen); }),
             Contains("no trainable parameters (4 parameters, none requires grad)"));
}

TEST_CASE("NonFiniteLoss::Ignore turns the check off", "[trainer]") {
  // Without the check a NaN loss flows into the weights, as in a plain PyTorch loop.
  auto model = test::small_mlp();
  TrainerOptions options = quiet();
  options.on_non_finite_loss = NonFiniteLoss::Ignore;
  options.loss = test::nan_on_call(1);  // the only batch
  Trainer<> trainer(options);
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  CHECK_NOTHROW(trainer.fit(model, optimizer, test::random_batches(1, 4)));
  CHECK(torch::isnan(model->parameters()[0]).any().item<bool>());  // ReLU stops it in places
}
