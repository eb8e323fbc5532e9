// Training an MLP on real Fashion-MNIST with ftopt's baseline policies, then the same training
// done in accumulated micro-batches, compared in a closing table.
//
//   build/examples/fashion_mnist [--epochs N] [--batch B] [--data DIR] [--train-limit N]

#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "args.hpp"

namespace {

struct Args {
  std::int64_t epochs = 3;
  std::int64_t batch = 64;
  std::int64_t train_limit = 0;  // 0: all 60,000 training images
  std::string data = ftopt::data::default_fashion_mnist_dir().string();
};

Args parse(int argc, char** argv) {
  Args args;
  examples::parse("fashion_mnist", argc, argv, {{"--epochs", &args.epochs}, {"--batch", &args.batch},
                  {"--train-limit", &args.train_limit}, {"--data", &args.data}});
  return args;
}

/// uint8 [N, 28, 28] -> float [N, 784], scaled to [0, 1] and standardized with the training
/// set's mean and standard deviation.
torch::Tensor normalize(const torch::Tensor& images, double mean, double std) {
  return images.to(torch::kFloat).div_(255.0).sub_(mean).div_(std).flatten(1);
}

struct Row {
  std::string setup;
  ftopt::FitSummary fit;
  ftopt::EvalStats test;
};

template <class Trainer>
Row run(std::string setup, Trainer trainer, const ftopt::data::TensorBatches& train,
        const ftopt::data::TensorBatches& test) {
  std::cerr << "\n== " << setup << '\n';
  torch::manual_seed(0);
  ftopt::models::Mlp model({.in = 784, .hidden = {256, 128}, .out = 10});
  const auto& params = trainer.prepare(model);
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(2e-3).weight_decay(1e-4));
  auto fit = trainer.fit(model, optimizer, train, ftopt::callbacks::ProgressBar{});
  auto eval = trainer.evaluate(model, test);
  std::cerr << "test accuracy " << std::fixed << std::setprecision(2)
            << 100.0 * eval.accuracy.value_or(0) << "%\n";
  return {std::move(setup), std::move(fit), eval};
}

void print_table(const std::vector<Row>& rows) {
  std::cout << "\n| setup | epochs | train loss | train acc | test acc | samples/s | fit s |\n"
            << "|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const auto& last = r.fit.epochs.back();
    double samples = 0;
    for (const auto& e : r.fit.epochs) samples += static_cast<double>(e.samples);
    std::cout << std::fixed << "| " << r.setup << " | " << r.fit.epochs.size() << " | "
              << std::setprecision(4) << last.loss << " | " << std::setprecision(2)
              << 100.0 * last.accuracy.value_or(0) << "% | " << 100.0 * r.test.accuracy.value_or(0)
              << "% | " << std::setprecision(0) << samples / r.fit.seconds << " | "
              << std::setprecision(1) << r.fit.seconds << " |\n";
  }
}

} // namespace

int main(int argc, char** argv) try {
  const Args args = parse(argc, argv);
  auto train_set = ftopt::data::load_fashion_mnist(ftopt::data::Split::Train, args.data);
  auto test_set = ftopt::data::load_fashion_mnist(ftopt::data::Split::Test, args.data);
  train_set = ftopt::data::first(train_set, args.train_limit);
  auto pixels = train_set.images.to(torch::kFloat).div_(255.0);
  const double mean = pixels.mean().item<double>(), std = pixels.std().item<double>();
  std::cerr << "Fashion-MNIST from " << args.data << ": " << train_set.images.size(0)
            << " training and " << test_set.images.size(0) << " test images\n";

  const auto x_train = normalize(train_set.images, mean, std);
  const auto x_test = normalize(test_set.images, mean, std);
  ftopt::data::TensorBatches test(x_test, test_set.labels, {.batch_size = 1000, .shuffle = false});
  ftopt::TrainerOptions options{.epochs = args.epochs,
                                .clip_grad_norm = 1.0,
                                .schedule = ftopt::schedule::WarmupCosine{.warmup_steps = 100},
                                .threads = ftopt::hardware::all_cpus};

  std::vector<Row> rows;
  {
    ftopt::data::TensorBatches train(x_train, train_set.labels, {.batch_size = args.batch, .seed = 1});
    rows.push_back(run("Trainer<> fp32, batch " + std::to_string(args.batch),
                       ftopt::Trainer<>(options), train, test));
  }
  {
    const std::int64_t micro = std::max<std::int64_t>(1, args.batch / 4);
    ftopt::data::TensorBatches train(x_train, train_set.labels, {.batch_size = micro, .seed = 1});
    using Accumulating = ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::None>;
    rows.push_back(run("Trainer<> fp32, 4 x " + std::to_string(micro) + " accumulated",
                       Accumulating(options, {}, {}, ftopt::memory::None{.accumulate = 4}), train, test));
  }
  print_table(rows);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "fashion_mnist: " << e.what() << '\n';
  return 1;
}
