#pragma once
/// Sample stages: cache(), augment() on the CPU, and batch().
///
///   from(ImageFolder("train")) | shuffle(1) | decode_jpeg() | cache() |
///       augment({.crop = RandomResizedCrop{.size = 28}, .horizontal_flip = 0.5, .seed = 2}) | batch(64)
///
/// cache(max_bytes): keeps decoded samples by source index, so the second pass decodes nothing.
/// Bounded, it keeps the first samples that fit and stops adding (on a pass over the whole set
/// a fixed subset beats least-recently-used, which would miss every time).
/// augment: each sample's random draws come from a generator seeded by (seed, epoch, source
/// index), so results do not depend on worker count or timing, and change every epoch.
/// batch(n): stacks samples into (data [n, ...], targets [n]); drop_last drops a last, smaller
/// batch. Samples a lenient decode_jpeg skipped are left out of their batch.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/ATen.h>

#include <ftopt/error.hpp>
#include <ftopt/pipeline/order.hpp>
#include <ftopt/pipeline/stage.hpp>

namespace ftopt::pipeline {

/// torchvision's RandomResizedCrop: a crop of random area (scale of the image) and aspect ratio,
/// resized to size x size (bilinear, without antialiasing).
struct RandomResizedCrop {
  std::int64_t size = 224;
  std::pair<double, double> scale = {0.08, 1.0};
  std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0};
};

/// torchvision's RandomCrop(size, padding, fill): pads every side by `padding` with `fill`, then
/// takes a size x size window at a random offset (top drawn first, then left), uniform over
/// the offsets that fit: on a 28x28 image, size 28 and padding 2 shift it by up to 2 pixels.
struct RandomCrop {
  std::int64_t size = 224;
  std::int64_t padding = 0;
  double fill = 0.0;  ///< in the sample's own units (a standardized image's black is -mean / std)
};

struct AugmentOptions {
  std::optional<std::variant<RandomResizedCrop, RandomCrop>> crop;
  double horizontal_flip = 0.0;  ///< probability of a left-right flip
  std::uint64_t seed = 0;
  /// More work per sample, after crop and flip, drawing from the sample's generator. It must
  /// return new tensors rather than write into sample.data: that may be a cached sample's.
  std::function<Sample(Sample, std::mt19937_64&)> custom;
};

namespace detail {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// torchvision.transforms.RandomResizedCrop.get_params: (top, left, height, width).
inline std::array<std::int64_t, 4> crop_box(std::int64_t H, std::int64_t W, const RandomResizedCrop& c,
                                            std::mt19937_64& rng) {
  const double area = static_cast<double>(H * W);
  const double log_lo = std::log(c.ratio.first), log_hi = std::log(c.ratio.second);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (c.scale.first + unit(rng) * (c.scale.second - c.scale.first));
    const double aspect = std::exp(log_lo + unit(rng) * (log_hi - log_lo));
    const auto w = static_cast<std::int64_t>(std::lround(std::sqrt(target * aspect)));
    const auto h = static_cast<std::int64_t>(std::lround(std::sqrt(target / aspect)));
    if (0 < w && w <= W && 0 < h && h <= H) {
      const auto top = std::uniform_int_distribution<std::int64_t>(0, H - h)(rng);
      const auto left = std::uniform_int_distribution<std::int64_t>(0, W - w)(rng);
      return {top, left, h, w};
    }
  }
  // Fallback: a center crop at the nearest allowed ratio.
  const double in_ratio = static_cast<double>(W) / static_cast<double>(H);
  std::int64_t w = W, h = H;
  if (in_ratio < c.ratio.first)
    h = std::lround(static_cast<double>(w) / c.ratio.first);
  else if (in_ratio > c.ratio.second)
    w = std::lround(static_cast<double>(h) * c.ratio.second);
  return {(H - h) / 2, (W - w) / 2, h, w};
}

/// Crops image [C, H, W] to box and resizes to size x size; uint8 stays uint8 (rounded).
inline at::Tensor resized_crop(const at::Tensor& image, const std::array<std::int64_t, 4>& box, std::int64_t size) {
  at::Tensor crop = image.narrow(1, box[0], box[2]).narrow(2, box[1], box[3]);
  if (box[2] == size && box[3] == size) return crop.contiguous();
  at::Tensor resized = at::upsample_bilinear2d(crop.unsqueeze(0).to(at::kFloat), {size, size}, /*align_corners=*/false)
                           .squeeze(0);
  return image.scalar_type() == at::kByte ? resized.round_().clamp_(0, 255).to(at::kByte) : resized.to(image.scalar_type());
}

inline at::Tensor random_crop(const at::Tensor& image, const RandomResizedCrop& crop, std::mt19937_64& rng) {
  return resized_crop(image, crop_box(image.size(-2), image.size(-1), crop, rng), crop.size);
}

inline at::Tensor random_crop(const at::Tensor& image, const RandomCrop& crop, std::mt19937_64& rng) {
  const std::int64_t p = crop.padding;
  const at::Tensor padded = p > 0 ? at::constant_pad_nd(image, {p, p, p, p}, crop.fill) : image;
  const std::int64_t H = padded.size(-2), W = padded.size(-1);
  ftopt::detail::check(H >= crop.size && W >= crop.size, "pipeline::augment: RandomCrop of size ", crop.size,
                       " does not fit a ", image.size(-2), "x", image.size(-1), " image padded by ", p);
  const auto top = std::uniform_int_distribution<std::int64_t>(0, H - crop.size)(rng);
  const auto left = std::uniform_int_distribution<std::int64_t>(0, W - crop.size)(rng);
  return padded.narrow(-2, top, crop.size).narrow(-1, left, crop.size).contiguous();
}

inline void validate(const RandomResizedCrop& c) {
  ftopt::detail::check(c.size >= 1 && c.scale.first > 0 && c.scale.first <= c.scale.second && c.ratio.first > 0 &&
                           c.ratio.first <= c.ratio.second,
                       "pipeline::augment: RandomResizedCrop needs size >= 1 and 0 < scale.first <= scale.second, "
                       "0 < ratio.first <= ratio.second");
}

inline void validate(const RandomCrop& c) {
  ftopt::detail::check(c.size >= 1 && c.padding >= 0, "pipeline::augment: RandomCrop needs size >= 1 and padding >= 0, "
                       "got size ", c.size, " and padding ", c.padding);
}

template <class Up>
class Cached : public Over<Up, Cached<Up>> {
public:
  Cached() = default;
  Cached(Up up, std::int64_t max_bytes) : Over<Up, Cached<Up>>(std::move(up)), max_bytes_(max_bytes) {}
  Sample at(std::int64_t k) const {
    const std::int64_t id = this->key(k);
    {
      std::lock_guard<std::mutex> lock(store_->mutex);
      if (auto it = store_->samples.find(id); it != store_->samples.end()) {
        ++this->stats()->cache_hits;
        return it->second;
      }
    }
    ++this->stats()->cache_misses;
    Sample sample = this->up_.at(k);
    const std::int64_t bytes = sample.data.defined() ? static_cast<std::int64_t>(sample.data.nbytes()) : 0;
    std::lock_guard<std::mutex> lock(store_->mutex);
    if (max_bytes_ < 0 || store_->bytes + bytes <= max_bytes_) {
      if (store_->samples.emplace(id, sample).second) store_->bytes += bytes;
    }
    return sample;
  }
  std::int64_t cached_bytes() const {
    std::lock_guard<std::mutex> lock(store_->mutex);
    return store_->bytes;
  }

private:
  struct Store {
    std::mutex mutex;
    std::unordered_map<std::int64_t, Sample> samples;
    std::int64_t bytes = 0;
  };
  std::int64_t max_bytes_ = -1;
  std::shared_ptr<Store> store_ = std::make_shared<Store>();
};

template <class Up>
class Augmented : public Over<Up, Augmented<Up>> {
public:
  Augmented() = default;
  Augmented(Up up, AugmentOptions options) : Over<Up, Augmented<Up>>(std::move(up)), options_(std::move(options)) {
    ftopt::detail::check(options_.horizontal_flip >= 0 && options_.horizontal_flip <= 1,
                         "pipeline::augment: horizontal_flip is a probability, got ", options_.horizontal_flip);
    if (options_.crop) std::visit([](const auto& crop) { validate(crop); }, *options_.crop);
  }
  void prepare_pass(std::uint64_t epoch) {
    this->up_.prepare_pass(epoch);
    epoch_ = epoch;
  }
  Sample at(std::int64_t k) const {
    Sample sample = this->up_.at(k);
    if (!sample.data.defined()) return sample;
    std::mt19937_64 rng(splitmix64(splitmix64(options_.seed) ^ splitmix64(epoch_ + 0x51ed2701) ^
                                   static_cast<std::uint64_t>(this->key(k))));
    if (options_.crop)
      sample.data = std::visit([&](const auto& crop) { return random_crop(sample.data, crop, rng); }, *options_.crop);
    if (options_.horizontal_flip > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng) < options_.horizontal_flip)
      sample.data = sample.data.flip({-1});
    if (options_.custom) sample = options_.custom(std::move(sample), rng);
    return sample;
  }

private:
  AugmentOptions options_;
  std::uint64_t epoch_ = 0;
};

template <class Up>
class Batched : public Over<Up, Batched<Up>> {
public:
  static constexpr Kind kind = Kind::Batches;

  Batched() = default;
  Batched(Up up, std::int64_t size, bool drop_last)
      : Over<Up, Batched<Up>>(std::move(up)), batch_(size), drop_last_(drop_last) {
    ftopt::detail::check(size >= 1, "pipeline::batch: the batch size must be >= 1, got ", size);
  }
  std::int64_t size() const {
    const std::int64_t n = this->up_.size();
    return drop_last_ ? n / batch_ : (n + batch_ - 1) / batch_;
  }
  Batch at(std::int64_t k) const {
    const std::int64_t begin = k * batch_, end = std::min(begin + batch_, this->up_.size());
    std::vector<at::Tensor> data, targets;
    data.reserve(static_cast<std::size_t>(end - begin));
    targets.reserve(static_cast<std::size_t>(end - begin));
    for (std::int64_t i = begin; i < end; ++i) {
      Sample s = this->up_.at(i);
      if (!s.data.defined()) continue;  // skipped by a lenient decoder
      data.push_back(std::move(s.data));
      targets.push_back(std::move(s.target));
    }
    ftopt::detail::check(!data.empty(), "pipeline::batch: every sample of batch ", k, " (positions ", begin, " to ",
                         end - 1, ") failed to decode");
    for (std::size_t i = 1; i < data.size(); ++i)
      ftopt::detail::check(data[i].sizes() == data[0].sizes(), "pipeline::batch: samples of batch ", k,
                           " differ in shape (", data[0].sizes(), " and ", data[i].sizes(),
                           "); crop or resize them to one size first (augment with RandomResizedCrop)");
    auto stats = this->stats();
    stats->samples += static_cast<std::int64_t>(data.size());
    ++stats->batches;
    return {at::stack(data), at::stack(targets)};
  }

private:
  std::int64_t batch_ = 1;
  bool drop_last_ = false;
};

template <class Up>
consteval bool check_sample_stage() {
  static_assert(Traits<Up>::kind == Kind::Samples, "ftopt::pipeline: cache(), augment() and batch() take decoded "
                                                   "samples: put decode_jpeg() before them, and batch() after them");
  static_assert(Traits<Up>::indexed, "ftopt::pipeline: cache(), augment() and batch() compute samples by index, "
                                     "on the workers: put them before prefetch() and before any range view");
  return true;
}

} // namespace detail

/// Keeps decoded samples in memory (max_bytes < 0: all of them).
inline auto cache(std::int64_t max_bytes = -1) {
  return detail::adaptor([max_bytes]<class R>(R&& range) {
    static_assert(detail::check_sample_stage<detail::Held<R>>());
    return detail::Cached<detail::Held<R>>(detail::hold(std::forward<R>(range)), max_bytes);
  });
}

/// Random crop (RandomResizedCrop or RandomCrop), flip and custom work per sample, on the CPU.
inline auto augment(AugmentOptions options) {
  return detail::adaptor([options = std::move(options)]<class R>(R&& range) {
    static_assert(detail::check_sample_stage<detail::Held<R>>());
    return detail::Augmented<detail::Held<R>>(detail::hold(std::forward<R>(range)), options);
  });
}

/// Stacks `size` samples per batch.
inline auto batch(std::int64_t size, bool drop_last = false) {
  return detail::adaptor([size, drop_last]<class R>(R&& range) {
    static_assert(detail::check_sample_stage<detail::Held<R>>());
    return detail::Batched<detail::Held<R>>(detail::hold(std::forward<R>(range)), size, drop_last);
  });
}

} // namespace ftopt::pipeline
