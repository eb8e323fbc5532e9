// Tests for include/ftopt/pipeline/samples.hpp: batch, cache, augment (torchvision's
// RandomResizedCrop.get_params and RandomCrop).
#include "stages.hpp"

#include <map>
#include <random>

TEST_CASE("batch stacks samples in order, drop_last drops the short batch", "[pipeline]") {
  auto batches = numbered(10) | batch(4);
  CHECK(batches.size() == 3);
  CHECK(targets_of(batches) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto first = *batches.begin();
  CHECK(first.first.sizes() == at::IntArrayRef{4, 1});
  auto dropped = batch(4, /*drop_last=*/true)(numbered(10));  // the call form
  CHECK(dropped.size() == 2);
  CHECK(targets_of(dropped).size() == 8);
}

TEST_CASE("cache: the second pass decodes nothing, a bounded cache stays under its bound", "[pipeline][cache]") {
  ScratchDir dir("cache");
  write_folder(dir.path, 4);
  auto batches = from(ImageFolder(dir.path)) | shuffle(2) | decode_jpeg() | cache() | batch(3);
  targets_of(batches);
  auto stats = batches.stats();
  CHECK(stats->decoded.load() == 8);
  CHECK(stats->cache_misses.load() == 8);
  targets_of(batches);
  CHECK(stats->decoded.load() == 8);
  CHECK(stats->cache_hits.load() == 8);

  auto bounded = from(ImageFolder(dir.path)) | decode_jpeg() | cache(3 * 28 * 28);
  for (std::int64_t k = 0; k < bounded.size(); ++k) bounded.at(k);
  CHECK(bounded.cached_bytes() == 3 * 28 * 28);
}

TEST_CASE("augment: torchvision's crop box rules, flips, and draws fixed by seed, epoch and sample", "[pipeline][augment]") {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) {
    const auto box = pipeline::detail::crop_box(28, 20, RandomResizedCrop{.size = 16}, rng);
    CHECK(box[0] >= 0);
    CHECK(box[1] >= 0);
    CHECK(box[0] + box[2] <= 28);
    CHECK(box[1] + box[3] <= 20);
  }
  // No ratio fits a 100 x 1 image within 10 tries: torchvision's center-crop fallback.
  const auto fallback = pipeline::detail::crop_box(100, 1, RandomResizedCrop{.ratio = {1.0, 1.0}}, rng);
  CHECK(fallback == std::array<std::int64_t, 4>{49, 0, 1, 1});

  auto images = torch::arange(2 * 4 * 4, torch::kFloat).view({2, 1, 4, 4}).to(torch::kByte);
  auto flipped = from(images, torch::arange(2)) | augment({.horizontal_flip = 1.0}) | batch(2);
  CHECK(torch::equal((*flipped.begin()).first, images.flip({-1})));

  auto make = [&](std::uint64_t seed) {
    return from(torch::randint(0, 256, {8, 1, 28, 28}, torch::kByte), torch::arange(8)) |
           augment({.crop = RandomResizedCrop{.size = 20}, .horizontal_flip = 0.5, .seed = seed}) | batch(8);
  };
  torch::manual_seed(3);
  auto a = make(1);
  torch::manual_seed(3);
  auto b = make(1);
  const auto pass_a = (*a.begin()).first, pass_b = (*b.begin()).first;
  CHECK(pass_a.sizes() == at::IntArrayRef{8, 1, 20, 20});
  CHECK(torch::equal(pass_a, pass_b));
  CHECK(!torch::equal((*a.begin()).first, pass_a));  // epoch 1 draws anew
}

TEST_CASE("augment: RandomCrop pads with fill and takes a window at a uniform offset (torchvision's RandomCrop)",
          "[pipeline][augment]") {
  // torchvision.transforms.RandomCrop(4, padding=1, fill=-1) on a 4x4 image: the image padded by
  // one -1 on every side, then a 4x4 window whose top and left are each uniform over {0, 1, 2}.
  const auto image = torch::arange(16, torch::kFloat).view({1, 4, 4});
  const auto padded = torch::constant_pad_nd(image, {1, 1, 1, 1}, -1.0);
  std::map<std::pair<std::int64_t, std::int64_t>, int> seen;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 900; ++i) {
    const auto out = pipeline::detail::random_crop(image, RandomCrop{.size = 4, .padding = 1, .fill = -1}, rng);
    REQUIRE(out.sizes() == at::IntArrayRef{1, 4, 4});
    int windows = 0;
    for (std::int64_t top = 0; top < 3; ++top)
      for (std::int64_t left = 0; left < 3; ++left)
        if (torch::equal(out, padded.narrow(1, top, 4).narrow(2, left, 4))) ++seen[{top, left}], ++windows;
    REQUIRE(windows == 1);
  }
  // Binomial(900, 1/9) per offset: mean 100, standard deviation 9.4.
  REQUIRE(seen.size() == 9);
  for (const auto& [offset, count] : seen) CHECK(std::abs(count - 100) < 40);

  const auto bytes = torch::full({1, 2, 2}, 7, torch::kByte);
  const auto shifted = pipeline::detail::random_crop(bytes, RandomCrop{.size = 2, .padding = 2, .fill = 3}, rng);
  CHECK(shifted.scalar_type() == torch::kByte);
  CHECK(((shifted == 7) | (shifted == 3)).all().item<bool>());

  auto images = torch::randint(0, 256, {8, 1, 28, 28}, torch::kByte);
  auto make = [&] {
    return from(images, torch::arange(8)) | augment({.crop = RandomCrop{.size = 28, .padding = 2}, .seed = 1}) | batch(8);
  };
  auto a = make(), b = make();
  const auto pass_a = (*a.begin()).first;
  CHECK(pass_a.sizes() == at::IntArrayRef{8, 1, 28, 28});
  CHECK(torch::equal(pass_a, (*b.begin()).first));
  CHECK(!torch::equal(pass_a, images));

  CHECK_THAT(test::message_of([&] { from(images, torch::arange(8)) | augment({.crop = RandomCrop{.size = 0}}); }),
             Contains("RandomCrop needs size >= 1 and padding >= 0, got size 0"));
  CHECK_THAT(test::message_of([&] { pipeline::detail::random_crop(image, RandomCrop{.size = 10, .padding = 1}, rng); }),
             Contains("RandomCrop of size 10 does not fit a 4x4 image padded by 1"));
}
