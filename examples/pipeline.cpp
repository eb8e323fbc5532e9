// The Pipeline feeding a Trainer: JPEG files in an ImageFolder (one sub-folder per class, as
// torchvision reads; make_image_folder writes Fashion-MNIST so) are shuffled per epoch, decoded
// on worker threads, cached after the first epoch, augmented, batched and trained on.
//
//   build/examples/make_image_folder --out /tmp/fashion-jpeg --limit 6000
//   build/examples/pipeline --train /tmp/fashion-jpeg [--epochs 2] [--workers 2]
//
// The closing line gives the Pipeline's own counts: samples, cache hits, skipped files and the
// fraction of the epoch the Trainer waited for a batch.

#include <iomanip>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/pipeline.hpp>

#include "args.hpp"

int main(int argc, char** argv) try {
  namespace fp = ftopt::pipeline;
  std::string train;
  std::int64_t epochs = 2, workers = 2;
  examples::parse("pipeline", argc, argv, {{"--train", &train}, {"--epochs", &epochs}, {"--workers", &workers}});
  ftopt::check(!train.empty(), "pipeline: --train DIR is required (an ImageFolder: build/examples/make_image_folder)");

  auto batches = fp::from(fp::ImageFolder(train))
               | fp::shuffle(1)
               | fp::decode_jpeg({.channels = 1})
               | fp::cache()
               | fp::augment({.crop = fp::RandomCrop{.size = 28, .padding = 2}, .horizontal_flip = 0.5, .seed = 2})
               | fp::batch(128)
               | fp::prefetch({.workers = static_cast<int>(workers)})
               | fp::to_device(torch::kCPU)  // a CUDA device here puts the batches on the GPU
               | fp::device_augment({.mean = {0.286}, .std = {0.353}});

  torch::manual_seed(0);
  ftopt::models::Mlp model({.in = 784, .hidden = {256}, .out = 10});
  ftopt::Trainer<> trainer({.epochs = epochs, .threads = ftopt::hardware::all_cpus});
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(2e-3));
  const auto summary = trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});

  const auto& last = summary.epochs.back();
  const auto stats = batches.stats();
  std::cout << std::fixed << std::setprecision(2) << "pipeline: " << epochs << " epoch(s) over " << last.samples
            << " images; training accuracy " << 100 * last.accuracy.value_or(0) << "% in the last epoch; "
            << stats->samples.load() << " samples, " << stats->cache_hits.load() << " from the cache, "
            << stats->skipped.load() << " files skipped; waited for data " << 100 * stats->wait_fraction()
            << "% of the time\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << '\n';
  return 1;
}
