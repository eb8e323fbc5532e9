// Tests for include/ftopt/pipeline/: sources, order (shuffle, shard), samples (cache, augment,
// batch), prefetch and the device stages. References: torch.utils.data.DistributedSampler
// (drop_last=False padding and striding), torchvision's ImageFolder (sorted class folders) and
// RandomResizedCrop.get_params and RandomCrop, torch.utils.data.DataLoader (order kept with workers),
// range-v3's and std::ranges' view adaptors (take, filter, transform) and closure composition.
// <torch/torch.h> first: LibTorch defines a CHECK macro of its own that Catch's must replace
// (the other tests get this order from the precompiled header; the TSan build has none).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <unistd.h>

#include <range/v3/view/filter.hpp>
#include <range/v3/view/take.hpp>
#include <range/v3/view/transform.hpp>

#include <ftopt/parallel/single.hpp>
#include <ftopt/pipeline.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"

using namespace ftopt;
using namespace ftopt::pipeline;
using Catch::Matchers::Contains;
using ftopt::test::ScratchDir;

namespace {

/// Samples whose data is their own index: [N, 1] floats, targets = index.
Tensors numbered(std::int64_t n) {
  auto index = at::arange(n, at::kLong);
  return from(index.to(at::kFloat).unsqueeze(1), index);
}

/// The targets of a pass over batches, in delivery order.
template <class R>
std::vector<std::int64_t> targets_of(R& range) {
  std::vector<std::int64_t> out;
  for (const auto& b : range) {
    auto t = b.second.contiguous();
    out.insert(out.end(), t.template data_ptr<std::int64_t>(), t.template data_ptr<std::int64_t>() + t.numel());
  }
  return out;
}

/// An indexed stage that counts the elements computed and throws at one position.
struct Probe : pipeline::detail::IndexedRange<Probe> {
  static constexpr Kind kind = Kind::Samples;
  static constexpr Place place = Place::Host;
  static constexpr bool indexed = true;
  std::int64_t n = 0, fail_at = -1;
  std::shared_ptr<std::atomic<int>> computed = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<Stats> counters = std::make_shared<Stats>();
  std::int64_t size() const { return n; }
  std::int64_t key(std::int64_t k) const { return k; }
  void prepare_pass(std::uint64_t) {}
  std::shared_ptr<Stats> stats() const { return counters; }
  Sample at(std::int64_t k) const {
    ++*computed;
    ftopt::detail::check(k != fail_at, "probe: sample ", k, " is broken");
    return {at::full({1}, static_cast<double>(k)), at::scalar_tensor(k, at::kLong)};
  }
};

/// An ImageFolder of `per_class` gray 28x28 JPEGs in classes "a" and "b", made from noise.
void write_folder(const std::filesystem::path& root, int per_class) {
  torch::manual_seed(21);
  for (std::string c : {"a", "b"}) {
    std::filesystem::create_directories(root / c);
    for (int i = 0; i < per_class; ++i)
      write_jpeg(root / c / (std::to_string(i) + ".jpg"), torch::randint(0, 256, {1, 28, 28}, torch::kByte), 95);
  }
}

} // namespace

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

TEST_CASE("shuffle: a permutation per epoch, the same for the same seed and epoch", "[pipeline]") {
  auto a = numbered(50) | shuffle(7) | batch(50);
  auto b = numbered(50) | shuffle(7) | batch(50);
  const auto first = targets_of(a), again = targets_of(b);
  CHECK(first == again);
  CHECK(std::set<std::int64_t>(first.begin(), first.end()).size() == 50);
  const auto second_pass = targets_of(a);  // the next epoch
  CHECK(second_pass != first);
  a.set_epoch(0);  // fit's set_epoch: epoch 0 again
  CHECK(targets_of(a) == first);
  auto other_seed = numbered(50) | shuffle(8) | batch(50);
  CHECK(targets_of(other_seed) != first);
}

TEST_CASE("shard: DistributedSampler's padding and striding", "[pipeline]") {
  // DistributedSampler(range(10), num_replicas=3, shuffle=False): indices + indices[:2], then
  // rank r takes indices[r::3].
  const std::vector<std::vector<std::int64_t>> expected = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  for (std::int64_t rank = 0; rank < 3; ++rank) {
    auto share = numbered(10) | shard(rank, 3) | batch(10);
    CHECK(targets_of(share) == expected[static_cast<std::size_t>(rank)]);
  }
  // Shuffled with one seed on every rank: equal shares, disjoint but for the padding, covering.
  std::multiset<std::int64_t> all;
  for (std::int64_t rank = 0; rank < 4; ++rank) {
    auto share = numbered(22) | shuffle(3) | shard(rank, 4) | batch(100);
    const auto got = targets_of(share);
    CHECK(got.size() == 6);
    all.insert(got.begin(), got.end());
  }
  CHECK(std::set<std::int64_t>(all.begin(), all.end()).size() == 22);
  CHECK(all.size() == 24);  // 2 padding repeats
  CHECK_THAT(test::message_of([] { numbered(5) | shard(3, 3); }), Contains("rank must be in [0, world), got rank 3 of world 3"));
}

TEST_CASE("prefetch keeps the order and the values of the plain pass, with any worker count", "[pipeline][prefetch]") {
  const AugmentOptions noise{.seed = 5, .custom = [](Sample s, std::mt19937_64& rng) {
                                s.data = s.data + static_cast<double>(rng() % 1000);
                                return s;
                              }};
  auto plain = numbered(37) | shuffle(1) | augment(noise) | batch(4);
  std::vector<at::Tensor> want;
  for (const auto& b : plain) want.push_back(b.first);
  for (int workers : {1, 2, 4}) {
    auto fast = numbered(37) | shuffle(1) | augment(noise) | batch(4) | prefetch({.workers = workers, .depth = 3});
    std::vector<at::Tensor> got;
    for (const auto& b : fast) got.push_back(b.first);
    INFO("workers " << workers);
    CHECK(test::same_values(want, got));
  }
  auto any_order = numbered(37) | batch(1) | prefetch({.workers = 3, .ordered = false});
  auto seen = targets_of(any_order);
  CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 37);
}

TEST_CASE("prefetch hands a worker's exception to the consumer at that element", "[pipeline][prefetch]") {
  Probe probe;
  probe.n = 20;
  probe.fail_at = 5;
  auto batches = std::move(probe) | batch(1) | prefetch({.workers = 3});
  std::vector<std::int64_t> delivered;
  CHECK_THAT(test::message_of([&] {
               for (const auto& b : batches) delivered.push_back(b.second.item<std::int64_t>());
             }),
             Contains("probe: sample 5 is broken"));
  CHECK(delivered == std::vector<std::int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("Leaving a prefetched loop early stops and joins the workers", "[pipeline][prefetch]") {
  Probe probe;
  probe.n = 1000;
  auto computed = probe.computed;
  auto batches = std::move(probe) | batch(1) | prefetch({.workers = 2, .depth = 4});
  int taken = 0;
  for (const auto& b : batches) {
    (void)b;
    if (++taken == 3) break;
  }
  // The pass was destroyed with the loop: its workers are joined, so the count is final and
  // at most what the window allowed.
  const int final_count = computed->load();
  CHECK(final_count <= 3 + 4 + 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(computed->load() == final_count);
}

TEST_CASE("ImageFolder and decode_jpeg: sorted classes, real JPEGs, reduced-size decode", "[pipeline][jpeg]") {
  ScratchDir dir("folder");
  write_folder(dir.path, 3);
  ImageFolder folder(dir.path);
  CHECK(folder.classes() == std::vector<std::string>{"a", "b"});
  CHECK(folder.size() == 6);
  auto samples = from(folder) | decode_jpeg();
  auto batches = std::move(samples) | batch(6);
  auto [x, y] = *batches.begin();
  CHECK(x.sizes() == at::IntArrayRef{6, 1, 28, 28});
  CHECK(x.scalar_type() == at::kByte);
  CHECK(targets_of(batches) == std::vector<std::int64_t>{0, 0, 0, 1, 1, 1});

  // Lossy, but close: a smooth RGB image decoded against what was encoded (quality 95).
  auto image = (torch::arange(3).view({3, 1, 1}) * 40 + torch::arange(64).view({1, 64, 1}) * 2 +
                torch::arange(48).view({1, 1, 48}))
                   .to(torch::kByte);
  const auto back = decode_jpeg_bytes(encode_jpeg(image, 95), "memory");
  CHECK(back.sizes() == image.sizes());
  CHECK((back.to(torch::kFloat) - image.to(torch::kFloat)).abs().mean().item<double>() < 3.0);
  // A 224 x 224 file decoded for a 56-pixel target: TurboJPEG's 1/4 scale.
  const auto big = decode_jpeg_bytes(encode_jpeg(torch::full({3, 224, 224}, 128, torch::kByte)), "memory",
                                     {.min_size = 56});
  CHECK(big.sizes() == at::IntArrayRef{3, 56, 56});
  const auto gray_as_rgb = decode_jpeg_bytes(encode_jpeg(torch::full({1, 8, 8}, 7, torch::kByte)), "m", {.channels = 3});
  CHECK(gray_as_rgb.size(0) == 3);
}

TEST_CASE("Bad image files are named, a lenient decode skips and counts them", "[pipeline][jpeg]") {
  ScratchDir dir("bad");
  CHECK_THAT(test::message_of([&] { ImageFolder{dir.path}; }), Contains("has no class sub-folders"));
  CHECK_THAT(test::message_of([&] { ImageFolder{dir.path / "missing"}; }), Contains("is not a folder"));
  std::filesystem::create_directories(dir.path / "empty");
  CHECK_THAT(test::message_of([&] { ImageFolder{dir.path}; }), Contains("empty has no .jpg or .jpeg files"));
  std::filesystem::remove_all(dir.path / "empty");

  write_folder(dir.path, 2);
  {  // not a JPEG at all
    std::ofstream(dir.path / "a" / "9-text.jpg") << "hello, I am not a picture";
  }
  const auto whole = pipeline::detail::read_bytes(dir.path / "b" / "0.jpg");
  {  // a JPEG cut in half
    std::ofstream out(dir.path / "b" / "9-half.jpg", std::ios::binary);
    out.write(reinterpret_cast<const char*>(whole.data()), static_cast<std::streamsize>(whole.size() / 2));
  }
  CHECK_THAT(test::message_of([&] { decode_jpeg_file(dir.path / "a" / "missing.jpg"); }),
             Contains("cannot read") && Contains("missing.jpg"));
  auto strict = from(ImageFolder(dir.path)) | decode_jpeg();
  CHECK_THAT(test::message_of([&] { strict.at(2); }), Contains("9-text.jpg is not a readable JPEG"));
  CHECK_THAT(test::message_of([&] { strict.at(5); }), Contains("9-half.jpg is corrupt or cut short"));

  auto lenient = from(ImageFolder(dir.path)) | decode_jpeg({.on_error = OnError::Skip}) | batch(3);
  const auto got = targets_of(lenient);
  CHECK(got == std::vector<std::int64_t>{0, 0, 1, 1});
  CHECK(lenient.stats()->skipped.load() == 2);
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

TEST_CASE("Stages are range-v3 views: closures compose before a source, with each other and with range-v3's",
          "[pipeline][ranges]") {
  using Batches = decltype(numbered(1) | shuffle(1) | batch(4));
  STATIC_REQUIRE(ranges::view_<Batches>);
  STATIC_REQUIRE(std::ranges::view<Batches>);
  STATIC_REQUIRE(std::ranges::input_range<decltype(numbered(1) | batch(4) | prefetch())>);

  // The order shuffle(3) draws for epoch 0, and the batches of 4 it makes, written out here.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  auto order = at::randperm(10, generator, at::TensorOptions().dtype(at::kLong));
  const std::vector<std::int64_t> want(order.data_ptr<std::int64_t>(), order.data_ptr<std::int64_t>() + 10);

  auto prep = shuffle(3) | batch(4);  // no source yet
  auto piped = numbered(10) | prep;
  auto called = prep(numbered(10));
  CHECK(piped.size() == 3);
  CHECK(targets_of(piped) == want);
  CHECK(targets_of(called) == want);

  // A range-v3 adaptor in the closure: the first two batches only.
  auto two = numbered(10) | (shuffle(3) | batch(4) | ranges::views::take(2));
  CHECK(targets_of(two) == std::vector<std::int64_t>(want.begin(), want.begin() + 8));

  // An lvalue source stays usable: the stage holds a copy that shares its tensors.
  const Tensors source = numbered(6);
  auto from_lvalue = source | batch(6);
  CHECK(targets_of(from_lvalue) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(source.size() == 6);
}

TEST_CASE("Range views mix with the stages: range-v3 and std::ranges after them, batch stages after a view",
          "[pipeline][ranges]") {
  // Batches of 3 over 0..11 without shuffle: batch k holds 3k, 3k + 1, 3k + 2.
  auto batches = numbered(12) | batch(3) | prefetch({.workers = 2});
  auto odd_first = batches | ranges::views::filter([](const pipeline::Batch& b) { return b.second[0].item<std::int64_t>() % 2 == 1; });
  CHECK(targets_of(odd_first) == std::vector<std::int64_t>{3, 4, 5, 9, 10, 11});

  // A view of batches feeds the batch stages at the end; its place is not known, so to_device takes it.
  auto doubled = batches | ranges::views::transform([](const pipeline::Batch& b) { return pipeline::Batch{b.first * 2, b.second}; }) |
                 to_device(torch::kCPU) | std::views::take(2);
  std::vector<float> values;
  for (const auto& [x, y] : doubled)
    for (std::int64_t i = 0; i < x.size(0); ++i) values.push_back(x[i][0].item<float>());
  CHECK(values == std::vector<float>{0, 2, 4, 6, 8, 10});

  // std::views on a stage directly.
  auto first = numbered(12) | batch(5) | std::views::take(1);
  CHECK(targets_of(first) == std::vector<std::int64_t>{0, 1, 2, 3, 4});

  // The Trainer takes a view of a pipeline: two steps an epoch.
  torch::manual_seed(5);
  auto data = torch::randn({40, 6});
  auto labels = torch::randint(0, 3, {40});
  auto model = test::small_mlp();
  Trainer<> trainer(test::quiet({.epochs = 1}));
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  auto summary = trainer.fit(model, optimizer, from(data, labels) | batch(8) | ranges::views::take(2));
  CHECK(summary.epochs[0].steps == 2);
  CHECK(summary.epochs[0].samples == 16);
}

TEST_CASE("shard takes the rank and world size from a Parallel policy", "[pipeline][ranges]") {
  // One rank: its share is the whole set, in order (DistributedSampler with num_replicas 1).
  auto all = numbered(7) | shard(parallel::Single{}) | batch(7);
  CHECK(targets_of(all) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6});
  // Two real ranks: tests/parallel/ddp_worker.cpp shards with shard(trainer.parallel()).
}

TEST_CASE("The Trainer trains from a Pipeline: sized, re-shuffled per epoch, counted", "[pipeline][trainer]") {
  torch::manual_seed(4);
  auto data = torch::randn({40, 6});
  auto labels = torch::randint(0, 3, {40});
  auto batches = from(data, labels) | shuffle(1) | batch(8) | prefetch({.workers = 2});
  auto model = test::small_mlp();
  // The loss sees each batch's targets: the order the Trainer trained in, epoch by epoch.
  std::vector<torch::Tensor> seen;
  TrainerOptions options = test::quiet({.epochs = 2});
  options.loss = [&seen](const torch::Tensor& out, const torch::Tensor& y) {
    seen.push_back(y.clone());
    return torch::nn::functional::cross_entropy(out, y);
  };
  Trainer<> trainer(options);
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  auto summary = trainer.fit(model, optimizer, batches);
  REQUIRE(seen.size() == 10);
  const auto epoch0 = torch::cat(std::vector<torch::Tensor>(seen.begin(), seen.begin() + 5));
  const auto epoch1 = torch::cat(std::vector<torch::Tensor>(seen.begin() + 5, seen.end()));
  CHECK_FALSE(torch::equal(epoch0, epoch1));  // re-shuffled: another order in epoch 1
  CHECK(torch::equal(std::get<0>(epoch0.sort()), std::get<0>(labels.sort())));  // each epoch: every sample once
  CHECK(torch::equal(std::get<0>(epoch1.sort()), std::get<0>(labels.sort())));
  // The order is the epoch's, not the pass's: epoch 1 again gives epoch 1's order.
  batches.set_epoch(1);
  std::vector<torch::Tensor> again;
  for (auto&& [x, y] : batches) again.push_back(y);
  CHECK(torch::equal(torch::cat(again), epoch1));
  CHECK(summary.epochs.size() == 2);
  CHECK(summary.epochs[1].steps == 5);
  CHECK(summary.epochs[1].samples == 40);
  auto stats = batches.stats();
  CHECK(stats->samples.load() == 120);  // two epochs of fit and the pass above
  CHECK(stats->batches.load() == 15);
  CHECK(stats->wait_fraction() >= 0.0);
  CHECK(stats->wait_fraction() <= 1.0);
}
