// Images per second through JPEG decode + random resized crop + flip + batch(64) with 2 worker
// threads: ftopt::pipeline against torch::data::DataLoader doing the same work (the same
// TurboJPEG decoder and crop code) with the same 2 workers, side by side, one pass over the
// folder per contender and iteration. A third contender adds cache() (decoded samples kept):
// its passes after the first decode nothing.
//
//   build/benchmarks/bench_pipeline
//
// The ImageFolder is 6000 Fashion-MNIST training images as JPEG (quality 90), written to
// $FTOPT_BENCH_JPEG_DIR (default /tmp/ftopt-bench-jpeg) on first use, as
// `build/examples/make_image_folder --out DIR --limit 6000` would.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <torch/torch.h>

#include <ftopt/data/fashion_mnist.hpp>
#include <ftopt/hardware.hpp>
#include <ftopt/pipeline.hpp>

#include "machine.hpp"
#include "side_by_side.hpp"

namespace {

namespace fp = ftopt::pipeline;

std::filesystem::path folder() {
  const char* env = std::getenv("FTOPT_BENCH_JPEG_DIR");
  std::filesystem::path root = env ? env : "/tmp/ftopt-bench-jpeg";
  if (!std::filesystem::exists(root / "done")) {
    auto set = ftopt::data::load_fashion_mnist(ftopt::data::Split::Train);
    std::vector<std::string> classes;
    for (int c = 0; c < 10; ++c) classes.push_back("class" + std::to_string(c));
    fp::write_image_folder(root, set.images.narrow(0, 0, 6000), set.labels.narrow(0, 0, 6000), classes);
    std::ofstream(root / "done") << "6000\n";
  }
  return root;
}

const fp::RandomResizedCrop crop{.size = 28, .scale = {0.5, 1.0}};

/// The same per-sample work as the pipeline's decode_jpeg + augment, for torch::data.
class JpegDataset : public torch::data::datasets::Dataset<JpegDataset> {
public:
  explicit JpegDataset(const fp::ImageFolder& files) {
    for (std::int64_t k = 0; k < files.size(); ++k) files_.push_back(files.at(k));
  }
  torch::data::Example<> get(std::size_t i) override {
    auto image = fp::decode_jpeg_file(files_[i].path);
    std::mt19937_64 rng(i * 7919 + passes_);
    image = fp::detail::resized_crop(image, fp::detail::crop_box(image.size(1), image.size(2), crop, rng), crop.size);
    if (std::uniform_real_distribution<double>(0, 1)(rng) < 0.5) image = image.flip({-1});
    return {image, torch::scalar_tensor(files_[i].label, torch::kLong)};
  }
  torch::optional<std::size_t> size() const override { return files_.size(); }

private:
  std::vector<fp::File> files_;
  std::uint64_t passes_ = 0;
};

template <class R>
std::int64_t one_pass(R& range) {
  std::int64_t images = 0;
  for (auto&& b : range) {
    if constexpr (requires { b.data; }) images += b.data.size(0);  // torch::data::Example
    else images += b.first.size(0);
  }
  return images;
}

void BM_JpegLoading(benchmark::State& state) {
  at::set_num_threads(1);  // the loaders' own threads do the work
  const fp::ImageFolder files(folder());
  const fp::AugmentOptions augment{.crop = crop, .horizontal_flip = 0.5, .seed = 1};
  auto pipeline = fp::from(files) | fp::shuffle(1) | fp::decode_jpeg() | fp::augment(augment) | fp::batch(64) |
                  fp::prefetch({.workers = 2});
  auto cached = fp::from(files) | fp::shuffle(1) | fp::decode_jpeg() | fp::cache() | fp::augment(augment) |
                fp::batch(64) | fp::prefetch({.workers = 2});
  auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      JpegDataset(files).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(64).workers(2));
  std::int64_t n = 0;
  std::vector<ftopt::bench::Contender> contenders = {{"dataloader", [&] { n = one_pass(*loader); }},
                                                     {"pipeline", [&] { n = one_pass(pipeline); }},
                                                     {"pipeline_cached", [&] { n = one_pass(cached); }}};
  ftopt::bench::side_by_side(state, contenders, 1);
  for (const auto& c : contenders) {
    const double us = state.counters[c.name + "_us"];
    state.counters[c.name + "_images_per_s"] = static_cast<double>(n) / (us * 1e-6);
  }
}

} // namespace

BENCHMARK(BM_JpegLoading)->Unit(benchmark::kMillisecond)->Iterations(5);
FTOPT_BENCHMARK_MAIN();
