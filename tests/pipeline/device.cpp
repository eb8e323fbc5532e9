// Tests for include/ftopt/pipeline/device.hpp: pin_memory and device_augment.
#include "stages.hpp"

TEST_CASE("Device stages: pin_memory passes through without CUDA, device_augment normalizes once", "[pipeline][device]") {
  auto images = torch::randint(0, 256, {6, 1, 4, 4}, torch::kByte);
  auto batches = from(images, torch::arange(6)) | batch(3) | prefetch({.workers = 1}) | pin_memory() |
                 to_device(torch::kCPU) | device_augment({.mean = {0.5}, .std = {0.25}});
  std::vector<at::Tensor> got;
  for (const auto& [x, y] : batches) got.push_back(x);
  REQUIRE(got.size() == 2);
  const auto want = (images.to(torch::kFloat) / 255.0 - 0.5) / 0.25;
  CHECK(torch::allclose(torch::cat(got), want, 1e-6, 1e-6));

  auto flips = from(images, torch::arange(6)) | batch(6) | to_device(torch::kCPU) | device_augment({.horizontal_flip = 1.0});
  CHECK(torch::allclose((*flips.begin()).first, images.flip({-1}).to(torch::kFloat) / 255.0));
  CHECK_THAT(test::message_of([] { device_augment({.mean = {0.5}, .std = {}}); }),
             Contains("mean has 1 values but std has 0"));
}
