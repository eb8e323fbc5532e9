// Tests for include/ftopt/data/fashion_mnist.hpp: a split is its images paired with int64 labels
// (reference labels computed with Python's gzip module, independently of ftopt), from the
// "<train|t10k>-<images-idx3|labels-idx1>-ubyte" files, gzipped or plain; files that do not
// belong together are named.
#include <catch2/catch.hpp>

#include <filesystem>

#include <torch/torch.h>

#include <ftopt/data/fashion_mnist.hpp>

#include "../support.hpp"
#include "idx_files.hpp"

namespace fs = std::filesystem;
using ftopt::test::message_of;
using Catch::Matchers::Contains;
using namespace ftopt::test::idx_files;

TEST_CASE("load_fashion_mnist pairs images with int64 labels", "[data][idx]") {
  auto test = ftopt::data::load_fashion_mnist(ftopt::data::Split::Test);
  CHECK(test.images.sizes() == torch::IntArrayRef({10000, 28, 28}));
  CHECK(test.labels.scalar_type() == torch::kLong);
  CHECK(torch::equal(test.labels.narrow(0, 0, 10),
                     torch::tensor({9, 2, 1, 1, 6, 1, 4, 6, 5, 7}, torch::kLong)));
  CHECK(ftopt::data::fashion_mnist_classes[9] == "Ankle boot");
}

TEST_CASE("load_fashion_mnist finds each split's files, gzipped or plain", "[data][idx]") {
  const auto dir = scratch("splits");
  // Test split: 2 images of 2 x 3 (values 0..11), gzipped; labels 7 and 3, plain.
  auto images = header(0x08, {2, 2, 3});
  for (unsigned char v = 0; v < 12; ++v) images.push_back(v);
  write_bytes(dir / "t10k-images-idx3-ubyte.gz", images, true);
  auto labels = header(0x08, {2});
  labels.push_back(7);
  labels.push_back(3);
  write_bytes(dir / "t10k-labels-idx1-ubyte", labels);
  const auto test = ftopt::data::load_fashion_mnist(ftopt::data::Split::Test, dir);
  CHECK(torch::equal(test.images, torch::arange(12, torch::kByte).view({2, 2, 3})));
  CHECK(torch::equal(test.labels, torch::tensor({7, 3}, torch::kLong)));
  // The gzipped file wins over a plain one of the same name.
  write_bytes(dir / "t10k-images-idx3-ubyte", header(0x08, {0, 2, 3}));
  CHECK(ftopt::data::load_fashion_mnist(ftopt::data::Split::Test, dir).images.size(0) == 2);
  // The train split's files are others.
  CHECK_THAT(message_of([&] { ftopt::data::load_fashion_mnist(ftopt::data::Split::Train, dir); }),
             Contains((dir / "train-images-idx3-ubyte").string() + "[.gz] not found"));
  fs::remove_all(dir);
}

TEST_CASE("load_idx_pair rejects files that do not belong together", "[data][idx][errors]") {
  const auto dir = scratch("pair");
  auto images = header(0x08, {3, 2, 2});
  images.resize(images.size() + 12, 0);
  write_bytes(dir / "images.idx", images);
  auto labels = header(0x08, {2});
  labels.push_back(1);
  labels.push_back(2);
  write_bytes(dir / "labels.idx", labels);
  CHECK_THAT(message_of([&] { ftopt::data::load_idx_pair(dir / "images.idx", dir / "labels.idx"); }),
             Contains("images.idx has 3 images but") && Contains("labels.idx has 2 labels"));

  auto bad = header(0x08, {3});
  for (unsigned char v : {1, 12, 3}) bad.push_back(v);
  write_bytes(dir / "bad.idx", bad);
  CHECK_THAT(message_of([&] { ftopt::data::load_idx_pair(dir / "images.idx", dir / "bad.idx"); }),
             Contains("label 12 at index 1 is not below 10 classes"));

  CHECK_THAT(message_of([&] { ftopt::data::load_idx_pair(dir / "labels.idx", dir / "labels.idx"); }),
             Contains("expected uint8 images [N, H, W], got 1 dims"));

  CHECK_THAT(message_of([&] { ftopt::data::load_fashion_mnist(ftopt::data::Split::Train, dir); }),
             Contains("train-images-idx3-ubyte[.gz] not found") && Contains("FTOPT_FASHION_MNIST"));
  fs::remove_all(dir);
}
