// Tests for include/ftopt/trainer.hpp with the baseline policies: each checks the Trainer
// against the PyTorch loop it replaces (same ops, same values), plus errors and callbacks.
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

TEST_CASE("Accumulating 4 micro-batches of 32 equals one batch of 128", "[trainer][memory]") {
  // mean over 128 = mean of the 4 means over 32 (equal sizes), so (sum of grads / 4) equals the
  // full-batch gradient up to fp32 rounding.
  auto micro = test::random_batches(4, 32);
  std::vector<torch::Tensor> xs, ys;
  for (auto& [x, y] : micro) xs.push_back(x), ys.push_back(y);
  test::Batches full{{torch::cat(xs), torch::cat(ys)}};

  auto accumulated = test::small_mlp();
  auto whole = test::small_mlp();
  Trainer<precision::Fp32, peft::Full, memory::None> by_four(quiet(), {}, {}, memory::None{.accumulate = 4});
  Trainer<> at_once(quiet());
  torch::optim::SGD opt_a(by_four.prepare(accumulated), torch::optim::SGDOptions(0.5));
  torch::optim::SGD opt_b(at_once.prepare(whole), torch::optim::SGDOptions(0.5));
  auto a = by_four.fit(accumulated, opt_a, micro);
  auto b = at_once.fit(whole, opt_b, full);
  CHECK(a.epochs[0].optimizer_steps == 1);
  CHECK(a.epochs[0].steps == 4);
  CHECK(b.epochs[0].optimizer_steps == 1);
  auto pa = test::snapshot(*accumulated), pb = test::snapshot(*whole);
  for (std::size_t i = 0; i < pa.size(); ++i) CHECK(torch::allclose(pa[i], pb[i], 1e-5, 1e-6));
  CHECK(a.epochs[0].loss == Approx(b.epochs[0].loss).epsilon(1e-5));
}

TEST_CASE("An epoch that ends inside an accumulation window still steps", "[trainer][memory]") {
  // Lightning's accumulate_grad_batches: the last, shorter window of an epoch steps too.
  auto batches = test::random_batches(5, 4);
  auto model = test::small_mlp();
  Trainer<precision::Fp32, peft::Full, memory::None> trainer(quiet({.epochs = 2}), {}, {},
                                                             memory::None{.accumulate = 2});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  auto summary = trainer.fit(model, optimizer, batches);
  CHECK(summary.epochs[0].optimizer_steps == 3);  // windows {0,1} {2,3} {4}
  CHECK(summary.epochs[1].optimizer_steps == 3);
}

TEST_CASE("train_step says whether the optimizer stepped", "[trainer][memory]") {
  // Accumulating 2: the first micro-batch of a window does not step, the second does, and a
  // micro-batch that ends the epoch steps whatever the window.
  auto model = test::small_mlp();
  Trainer<precision::Fp32, peft::Full, memory::None> trainer(quiet(), {}, {}, memory::None{.accumulate = 2});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  const auto batch = test::random_batches(1, 4).front();
  CHECK_FALSE(trainer.train_step(model, optimizer, batch).stepped);
  CHECK(trainer.train_step(model, optimizer, batch).stepped);
  CHECK(trainer.train_step(model, optimizer, batch, /*ends_epoch=*/true).stepped);
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

TEST_CASE("Gradient clipping matches torch.nn.utils.clip_grad_norm_", "[trainer][clip]") {
  // PyTorch: total = ||(||g_i||)||, coef = min(1, max_norm / (total + 1e-6)), g_i *= coef.
  // LibTorch's own clip_grad_norm_ implements the same formula; compare against it.
  torch::manual_seed(3);
  std::vector<torch::Tensor> ours, theirs;
  for (auto shape : {std::vector<std::int64_t>{3, 4}, {5}, {2, 2, 2}}) {
    auto g = torch::randn(shape) * 3;
    auto a = torch::zeros(shape, torch::requires_grad()), b = torch::zeros(shape, torch::requires_grad());
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    ours.push_back(a);
    theirs.push_back(b);
  }
  for (double max_norm : {0.5, 1e6}) {
    auto total = ftopt::detail::clip_grad_norm(ours, max_norm).item<double>();
    auto expected = torch::nn::utils::clip_grad_norm_(theirs, max_norm);
    CHECK(total == Approx(expected).epsilon(1e-6));
    for (std::size_t i = 0; i < ours.size(); ++i) CHECK(torch::allclose(ours[i].grad(), theirs[i].grad(), 1e-6, 1e-7));
  }
  SECTION("the Trainer's update is the clipped gradient") {
    auto model = test::small_mlp();
    auto before = test::snapshot(*model);
    Trainer<> trainer(quiet({.clip_grad_norm = 0.01}));
    torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(1.0));
    trainer.fit(model, optimizer, test::random_batches(1, 16));
    auto after = test::snapshot(*model);
    double squared = 0;
    for (std::size_t i = 0; i < after.size(); ++i) squared += (after[i] - before[i]).pow(2).sum().item<double>();
    CHECK(std::sqrt(squared) == Approx(0.01).epsilon(1e-4));  // lr 1: the step is the gradient
  }
}

TEST_CASE("The warmup-cosine schedule sets each step's learning rate", "[trainer][schedule]") {
  auto batches = test::random_batches(6, 4);
  auto model = test::small_mlp();
  schedule::WarmupCosine schedule{.warmup_steps = 2};
  Trainer<> trainer(quiet({.epochs = 2, .schedule = schedule}));
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.3));
  struct Recorder {
    std::vector<double> lrs;
    void on_step_end(const FitState& s) { lrs.push_back(s.lr); }
  } recorder;
  trainer.fit(model, optimizer, batches, recorder);
  REQUIRE(recorder.lrs.size() == 12);
  // Hugging Face's cosine with warmup 2 over the 12 steps the Trainer derives (2 epochs x 6
  // batches): k / 2 while warming up, then 0.5 (1 + cos(pi (k - 2) / 10)).
  for (std::int64_t k = 0; k < 12; ++k) {
    const double expected = k < 2 ? k / 2.0 : 0.5 * (1 + std::cos(M_PI * static_cast<double>(k - 2) / 10.0));
    CHECK(recorder.lrs[k] == Approx(0.3 * expected));
  }
  CHECK(recorder.lrs[0] == 0.0);   // HF: the first warmup step has lr 0
  CHECK(recorder.lrs[2] == Approx(0.3));
}

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

TEST_CASE("Bad settings are rejected with the value", "[trainer][errors]") {
  CHECK_THAT(message_of([] { Trainer<>(quiet({.epochs = 0})); }), Contains("epochs must be >= 1, got 0"));
  CHECK_THAT(message_of([] { Trainer<>(quiet({.clip_grad_norm = -1})); }),
             Contains("clip_grad_norm must be >= 0 (0 = off), got -1"));
  CHECK_THAT(message_of([] {
               Trainer<>(quiet({.schedule = schedule::WarmupCosine{.min_lr_ratio = 2}}));
             }),
             Contains("min_lr_ratio must be in [0, 1], got 2"));
  CHECK_THAT(message_of([] {
               Trainer<precision::Fp32, peft::Full, memory::None>(quiet(), {}, {}, {.accumulate = 0});
             }),
             Contains("memory::None: accumulate must be >= 1, got 0"));
  CHECK_THAT(message_of([] {
               auto model = test::small_mlp();
               Trainer<> trainer(quiet());
               torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
               trainer.fit(model, optimizer, test::Batches{});
             }),
             Contains("the batch range is empty in epoch 0"));
}

TEST_CASE("Callbacks see every hook in order and can stop fit", "[trainer][callbacks]") {
  auto batches = test::random_batches(4, 4);
  struct Log {
    std::vector<std::string> events;
    std::int64_t stop_after_steps = -1, stop_after_epoch = -1;
    void on_fit_begin(const FitState&) { events.push_back("fit_begin"); }
    void on_epoch_begin(const FitState& s) { events.push_back("epoch_begin " + std::to_string(s.epoch)); }
    Signal on_step_end(const FitState& s) {
      events.push_back("step " + std::to_string(s.step));
      return s.step == stop_after_steps ? Signal::Stop : Signal::Continue;
    }
    Signal on_epoch_end(const FitState& s, const EpochStats&) {
      events.push_back("epoch_end " + std::to_string(s.epoch));
      return s.epoch == stop_after_epoch ? Signal::Stop : Signal::Continue;
    }
    void on_fit_end(const FitSummary& f) { events.push_back("fit_end " + std::to_string(f.epochs.size())); }
  };
  struct OnlyEpochs {  // implements one hook; the rest are optional
    int epochs = 0;
    void on_epoch_end(const FitState&, const EpochStats&) { ++epochs; }
  };
  auto model = test::small_mlp();
  Trainer<> trainer(quiet({.epochs = 3}));
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));

  SECTION("all hooks, in order") {
    Log log;
    OnlyEpochs counter;
    auto summary = trainer.fit(model, optimizer, test::random_batches(2, 4), log, counter);
    CHECK(log.events == std::vector<std::string>{"fit_begin", "epoch_begin 0", "step 1", "step 2",
                                                 "epoch_end 0", "epoch_begin 1", "step 1", "step 2",
                                                 "epoch_end 1", "epoch_begin 2", "step 1", "step 2",
                                                 "epoch_end 2", "fit_end 3"});
    CHECK(counter.epochs == 3);
    CHECK_FALSE(summary.stopped_early);
  }
  SECTION("stop inside an epoch") {
    Log log{.stop_after_steps = 3};
    auto summary = trainer.fit(model, optimizer, batches, log);
    CHECK(summary.stopped_early);
    REQUIRE(summary.epochs.size() == 1);
    CHECK(summary.epochs[0].steps == 3);
  }
  SECTION("stop at an epoch's end") {
    Log log{.stop_after_epoch = 1};
    auto summary = trainer.fit(model, optimizer, batches, log);
    CHECK(summary.stopped_early);
    CHECK(summary.epochs.size() == 2);
  }
}

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

TEST_CASE("evaluate computes mean loss and accuracy without touching the weights", "[trainer]") {
  auto batches = test::random_batches(3, 10);
  auto model = test::small_mlp(1, /*dropout=*/0.5);
  Trainer<> trainer(quiet());
  trainer.prepare(model);
  auto before = test::snapshot(*model);
  model->train();
  auto stats = trainer.evaluate(model, batches);
  CHECK(model->is_training());  // restored
  CHECK(test::same_values(before, test::snapshot(*model)));
  model->eval();  // reference: eval mode, so dropout is off as in evaluate
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> xs, ys;
  for (auto& [x, y] : batches) xs.push_back(x), ys.push_back(y);
  auto out = model->forward(torch::cat(xs));
  auto y = torch::cat(ys);
  CHECK(stats.samples == 30);
  CHECK(stats.loss == Approx(torch::nn::functional::cross_entropy(out, y).item<double>()).epsilon(1e-6));
  CHECK(*stats.accuracy == Approx(out.argmax(1).eq(y).sum().item<double>() / 30));
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
