// Tests for include/ftopt/trainer.hpp with the baseline policies: the step against the PyTorch loop
// it replaces (same ops, same values), threads and the hardware report, a label outside the head,
// and convergence on real Fashion-MNIST. Its parts: tests/trainer/.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "support.hpp"

using namespace ftopt;
using ftopt::test::message_of;
using Catch::Matchers::Contains;

using ftopt::test::quiet;

TEST_CASE("Trainer<> steps exactly as the hand-written PyTorch loop", "[trainer]") {
  // The loop of the PyTorch tutorials: zero_grad; loss = cross_entropy(model(x), y);
  // loss.backward(); optimizer.step(). Same weights, same batches: bitwise the same result.
  auto batches = test::random_batches(3, 8);
  auto model = test::small_mlp();
  auto reference = test::small_mlp();
  Trainer<> trainer(quiet());
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD reference_optimizer(reference->parameters(),
                                        torch::optim::SGDOptions(0.1).momentum(0.9));
  auto summary = trainer.fit(model, optimizer, batches);
  for (auto& [x, y] : batches) {
    reference_optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(reference->forward(x), y);
    loss.backward();
    reference_optimizer.step();
  }
  CHECK(test::same_values(test::snapshot(*model), test::snapshot(*reference)));
  REQUIRE(summary.epochs.size() == 1);
  CHECK(summary.epochs[0].steps == 3);
  CHECK(summary.epochs[0].optimizer_steps == 3);
  CHECK(summary.epochs[0].samples == 24);
}

TEST_CASE("fit sets the thread count only when TrainerOptions::threads asks", "[trainer][hardware]") {
  const int before = at::get_num_threads();
  auto train = [](TrainerOptions options) {
    auto model = test::small_mlp();
    Trainer<> trainer(quiet(options));
    torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
    trainer.fit(model, optimizer, test::random_batches(1, 4));
  };
  at::set_num_threads(1);
  train({});
  CHECK(at::get_num_threads() == 1);  // the program's choice stands
  train({.threads = 2});
  CHECK(at::get_num_threads() == 2);
  CHECK_THAT(message_of([] { Trainer<>(quiet({.threads = -1})); }),
             Contains("TrainerOptions: threads must be >= 0 (hardware::all_cpus = 0), got -1"));
  at::set_num_threads(before);
}

TEST_CASE("The hardware report prints once per process, whatever the Trainer type", "[trainer][hardware]") {
  // Two Trainer types print it once in all: a flag that is a static of the class template would
  // print it once per type.
  std::ostringstream log;
  auto options = quiet();
  options.report_hardware = true;
  options.log = &log;
  auto train = [&]<class T>(T trainer) {
    auto model = test::small_mlp();
    torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
    trainer.fit(model, optimizer, test::random_batches(1, 4));
  };
  hardware::detail::reported = false;  // as at the start of a process
  train(Trainer<>(options));
  train(Trainer<precision::Bf16Mixed>(options));
  train(Trainer<>(options));
  const std::string text = log.str();
  const std::string line = std::string("ftopt: LibTorch ") + TORCH_VERSION;
  CHECK(text.find(line) == 0);
  CHECK(text.find(line, 1) == std::string::npos);
}

TEST_CASE("fit reports the hardware once, on its log", "[trainer]") {
  std::ostringstream log;
  hardware::detail::reported = false;  // as at the start of a process
  auto model = test::small_mlp();
  Trainer<> trainer({.device = torch::kCPU, .log = &log});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  trainer.fit(model, optimizer, test::random_batches(1, 4));
  trainer.fit(model, optimizer, test::random_batches(1, 4));
  const std::string text = log.str();
  CHECK_THAT(text, Catch::StartsWith("ftopt: LibTorch "));
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
}

TEST_CASE("Trainer<> learns real Fashion-MNIST", "[trainer][convergence]") {
  // 6,000 training images, 2 epochs: an MLP gets well above chance (10%); 75% is a loose floor.
  auto train = data::load_fashion_mnist(data::Split::Train);
  auto test_set = data::load_fashion_mnist(data::Split::Test);
  auto prep = [](const torch::Tensor& images) { return images.to(torch::kFloat).div(255).sub(0.286).div(0.353); };
  data::TensorBatches train_batches(prep(train.images.narrow(0, 0, 6000)), train.labels.narrow(0, 0, 6000),
                                    {.batch_size = 64, .seed = 3});
  data::TensorBatches test_batches(prep(test_set.images.narrow(0, 0, 2000)), test_set.labels.narrow(0, 0, 2000),
                                   {.batch_size = 500, .shuffle = false});
  torch::manual_seed(0);
  models::Mlp model({.in = 784, .hidden = {128}, .out = 10});
  Trainer<> trainer(quiet({.epochs = 2}));
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(2e-3));
  auto summary = trainer.fit(model, optimizer, train_batches);
  auto eval = trainer.evaluate(model, test_batches);
  CHECK(summary.epochs[1].loss < summary.epochs[0].loss);
  CHECK(*eval.accuracy > 0.75);
}

TEST_CASE("A label outside the model's head is an error naming it, and ignore_index targets pass", "[trainer]") {
  auto model = test::small_mlp();  // 3 outputs
  Trainer<> trainer(test::quiet());
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  const auto x = torch::randn({4, 6});
  const auto before = test::snapshot(*model);
  const auto message = test::message_of([&] {
    trainer.train_step(model, optimizer, std::pair{x, torch::tensor({1, 7, 2, 0})});
  });
  CHECK(message.find("cross_entropy: the target 7 is outside the model's 3 outputs (classes 0..2)") != std::string::npos);
  CHECK(test::same_values(before, test::snapshot(*model)));
  CHECK(test::message_of([&] { ftopt::cross_entropy(torch::randn({2, 3}), torch::tensor({-1, 0})); })
            .find("the target -1 is outside") != std::string::npos);
  CHECK(ftopt::cross_entropy(torch::randn({2, 3}), torch::tensor({-100, 2})).isfinite().item<bool>());
}
