// Data-parallel training on Fashion-MNIST with parallel::Ddp: the same program runs alone, under
// ftopt-launch on one machine, or under torchrun / an srun or mpirun script on a cluster.
//
//   build/tools/ftopt-launch --nproc 2 -- build/examples/ddp [--epochs N] [--batch B]
//                          [--train-limit N] [--data DIR] [--checkpoint PATH]
//
// Each rank reads its shard of the training and test sets (the Pipeline's shard stage); loss and
// accuracy are averaged over all ranks; only rank 0 draws the progress bar and writes the
// checkpoint. --batch is per rank.

#include <iomanip>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/parallel/ddp.hpp>
#include <ftopt/parallel/gloo.hpp>  // the backends: <ftopt.hpp> leaves them out
#include <ftopt/parallel/nccl.hpp>
#include <ftopt/pipeline.hpp>

#include "args.hpp"

namespace {

struct Args {
  std::int64_t epochs = 2;
  std::int64_t batch = 64;
  std::int64_t train_limit = 0;  // 0: all 60,000 training images
  std::string data = ftopt::data::default_fashion_mnist_dir().string();
  std::string checkpoint;
};

Args parse(int argc, char** argv) {
  Args args;
  examples::parse("ddp", argc, argv, {{"--epochs", &args.epochs}, {"--batch", &args.batch},
                  {"--train-limit", &args.train_limit}, {"--data", &args.data}, {"--checkpoint", &args.checkpoint}});
  return args;
}

} // namespace

int main(int argc, char** argv) try {
  namespace fp = ftopt::pipeline;
  const Args args = parse(argc, argv);
  auto train_set = ftopt::data::load_fashion_mnist(ftopt::data::Split::Train, args.data);
  auto test_set = ftopt::data::load_fashion_mnist(ftopt::data::Split::Test, args.data);
  train_set = ftopt::data::first(train_set, args.train_limit);
  const auto images = [](const torch::Tensor& t) { return t.to(torch::kFloat).div_(255.0).sub_(0.286).div_(0.353); };

  ftopt::TrainerOptions options{.epochs = args.epochs, .schedule = ftopt::schedule::WarmupCosine{.warmup_steps = 50},
                                .threads = ftopt::hardware::all_cpus};
  if (!args.checkpoint.empty()) options.checkpoint = ftopt::CheckpointOptions{.path = args.checkpoint};
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::None, ftopt::parallel::Ddp> trainer(options);
  const int rank = trainer.parallel().rank(), world = trainer.parallel().world_size();

  torch::manual_seed(0);
  ftopt::models::Mlp model({.in = 784, .hidden = {256, 128}, .out = 10});
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(2e-3).weight_decay(1e-4));

  auto train = fp::from(images(train_set.images), train_set.labels) | fp::shuffle(1) | fp::shard(trainer.parallel()) |
               fp::batch(args.batch);
  auto test = fp::from(images(test_set.images), test_set.labels) | fp::shard(trainer.parallel()) | fp::batch(1000);
  const auto fit = trainer.fit(model, optimizer, train, ftopt::callbacks::ProgressBar{});
  const auto eval = trainer.evaluate(model, test);
  if (rank == 0) {
    const auto& last = fit.epochs.back();
    std::cout << std::fixed << std::setprecision(2) << "ddp: " << world << " rank(s), batch " << args.batch
              << " per rank: train loss " << std::setprecision(4) << last.loss << ", test accuracy "
              << std::setprecision(2) << 100.0 * eval.accuracy.value_or(0) << "% over " << eval.samples
              << " images, " << std::setprecision(0) << last.samples_per_second << " samples/s\n";
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
