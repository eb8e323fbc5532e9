#pragma once
/// Batch stages at the end of a Pipeline: pin_memory(), to_device(device) and device_augment().
///
///   ... | batch(64) | prefetch() | pin_memory() | to_device(torch::kCUDA) |
///       device_augment({.horizontal_flip = 0.5, .mean = {0.286}, .std = {0.353}})
///
/// pin_memory copies host batches into page-locked memory so the copy to a CUDA device can run
/// asynchronously; where LibTorch has no CUDA (the Debian CPU build) there is no pinned memory
/// and it passes batches through unchanged. to_device copies batches (non-blocking by default;
/// a CPU target is a no-op). device_augment works on whole batches on their device: random
/// flips, brightness and contrast per sample, then uint8 -> float and normalization once, at
/// the end: (x / 255 - mean) / std per channel.

#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <ftopt/error.hpp>
#include <ftopt/pipeline/samples.hpp>
#include <ftopt/pipeline/stage.hpp>

namespace ftopt::pipeline {

struct DeviceAugmentOptions {
  double horizontal_flip = 0.0;  ///< probability per sample
  double brightness = 0.0;       ///< factor uniform in [1 - b, 1 + b] per sample (torchvision ColorJitter)
  double contrast = 0.0;         ///< factor uniform in [1 - c, 1 + c] per sample
  std::vector<double> mean;      ///< per channel, after scaling to [0, 1]; empty: no normalization
  std::vector<double> std;
  std::uint64_t seed = 0;
};

namespace detail {

/// A stream stage: f(element, epoch, index) applied to each element of the range before it,
/// once per element, on the consumer's thread. F is a named function object, so the stage stays
/// default-constructible and assignable, as a range-v3 view must be.
template <class Up, class F, Kind K, Place P>
class Mapped : public View {
public:
  static constexpr Kind kind = K;
  static constexpr Place place = P;
  static constexpr bool indexed = false;

private:
  using UpIterator = ranges::iterator_t<Up>;
  using UpSentinel = ranges::sentinel_t<Up>;

public:
  using value_type = std::remove_cvref_t<std::invoke_result_t<const F&, ranges::iter_reference_t<UpIterator>,
                                                               std::uint64_t, std::int64_t>>;
  Mapped() = default;
  Mapped(Up up, F f) : up_(std::move(up)), f_(std::move(f)) {}

  struct sentinel {
    UpSentinel end;
  };
  class iterator {
  public:
    using iterator_concept = std::input_iterator_tag;
    using iterator_category = std::input_iterator_tag;  // as IndexedRange's iterator
    using value_type = Mapped::value_type;
    using reference = const value_type&;
    using pointer = const value_type*;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(UpIterator it, const F* f, std::uint64_t epoch) : it_(std::move(it)), f_(f), epoch_(epoch) {}
    const value_type& operator*() const {
      if (!current_) current_.emplace((*f_)(*it_, epoch_, index_));
      return *current_;
    }
    iterator& operator++() {
      ++it_;
      ++index_;
      current_.reset();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, const sentinel& s) { return it.it_ == s.end; }

  private:
    UpIterator it_;
    const F* f_ = nullptr;
    std::uint64_t epoch_ = 0;
    std::int64_t index_ = 0;
    mutable std::optional<value_type> current_;
  };

  void set_epoch(std::uint64_t epoch) {
    next_epoch_ = epoch;
    if constexpr (requires { up_.set_epoch(epoch); }) up_.set_epoch(epoch);
  }
  iterator begin() { return {ranges::begin(up_), &f_, next_epoch_++}; }
  sentinel end() { return {ranges::end(up_)}; }
  std::int64_t size() const
    requires ranges::sized_range<const Up>
  {
    return static_cast<std::int64_t>(ranges::size(up_));
  }
  std::shared_ptr<Stats> stats() const
    requires requires(const Up& u) { u.stats(); }
  {
    return up_.stats();
  }

private:
  Up up_;
  F f_;
  std::uint64_t next_epoch_ = 0;
};

template <Kind K, Place P, class R, class F>
auto mapped(R&& range, F f) {
  return Mapped<Held<R>, F, K, P>(hold(std::forward<R>(range)), std::move(f));
}

/// Per-sample factors uniform in [1 - spread, 1 + spread], shaped [N, 1, 1, 1].
inline at::Tensor factors(std::int64_t n, double spread, at::Generator& generator, const at::TensorOptions& options) {
  return (at::rand({n}, generator, at::kFloat) * (2 * spread) + (1 - spread)).view({n, 1, 1, 1}).to(options);
}

inline Batch augment_batch(const Batch& batch, const DeviceAugmentOptions& o, std::uint64_t epoch,
                           std::int64_t index) {
  at::Tensor x = batch.first;
  ftopt::detail::check(x.dim() == 4, "pipeline::device_augment: needs image batches [N, C, H, W], got ", x.sizes());
  const bool bytes = x.scalar_type() == at::kByte;
  x = bytes ? x.to(at::kFloat).div_(255.0) : x.to(at::kFloat);
  const auto n = x.size(0);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(
      splitmix64(splitmix64(o.seed) ^ splitmix64(epoch + 0x2545f491) ^ static_cast<std::uint64_t>(index)));
  if (o.horizontal_flip > 0) {
    auto flip = (at::rand({n}, generator, at::kFloat) < o.horizontal_flip).view({n, 1, 1, 1}).to(x.device());
    x = at::where(flip, x.flip({-1}), x);
  }
  if (o.brightness > 0) x = (x * factors(n, o.brightness, generator, x.options())).clamp_(0, 1);
  if (o.contrast > 0) {
    // torchvision adjust_contrast: blend with the mean of the grayscale image.
    const auto gray = x.size(1) == 3 ? (x.select(1, 0) * 0.2989 + x.select(1, 1) * 0.587 + x.select(1, 2) * 0.114)
                                     : x.select(1, 0);
    const auto m = gray.mean({-2, -1}).view({n, 1, 1, 1});
    x = ((x - m) * factors(n, o.contrast, generator, x.options()) + m).clamp_(0, 1);
  }
  if (!o.mean.empty()) {
    const auto c = x.size(1);
    ftopt::detail::check(static_cast<std::int64_t>(o.mean.size()) == c, "pipeline::device_augment: ", o.mean.size(),
                         " mean/std values for images of ", c, " channels");
    auto mean = at::tensor(o.mean, at::kDouble).to(x.options()).view({1, c, 1, 1});
    auto std = at::tensor(o.std, at::kDouble).to(x.options()).view({1, c, 1, 1});
    x = (x - mean) / std;
  }
  return {x, batch.second};
}

struct PinBatch {
  Batch operator()(const Batch& b, std::uint64_t, std::int64_t) const {
    if (!at::globalContext().hasCUDA()) return b;
    return {b.first.pin_memory(), b.second.pin_memory()};
  }
};

struct BatchToDevice {
  c10::Device device{c10::kCPU};
  bool non_blocking = true;
  Batch operator()(const Batch& b, std::uint64_t, std::int64_t) const {
    return {b.first.to(device, non_blocking), b.second.to(device, non_blocking)};
  }
};

struct AugmentBatch {
  DeviceAugmentOptions options;
  Batch operator()(const Batch& b, std::uint64_t epoch, std::int64_t index) const {
    return augment_batch(b, options, epoch, index);
  }
};

/// What the batch stages at the end take: batches, from an ftopt stage at a known place or
/// from any range of batches.
template <class Up>
consteval bool takes_batches() {
  static_assert(Traits<Up>::kind == Kind::Batches, "ftopt::pipeline: pin_memory(), to_device() and device_augment() "
                                                   "take batches: put them after batch() (and prefetch())");
  return true;
}

} // namespace detail

/// Host batches into page-locked memory (CUDA builds); unchanged where LibTorch has no CUDA.
inline auto pin_memory() {
  return detail::adaptor([]<class R>(R&& range) {
    using Up = detail::Traits<detail::Held<R>>;
    static_assert(detail::takes_batches<detail::Held<R>>());
    static_assert(!Up::knows_place || Up::place == Place::Host,
                  "ftopt::pipeline: pin_memory() takes batches on the host: put it before to_device()");
    return detail::mapped<Kind::Batches, Place::Pinned>(std::forward<R>(range), detail::PinBatch{});
  });
}

/// Batches to `device` (non-blocking from pinned memory).
inline auto to_device(c10::Device device, bool non_blocking = true) {
  return detail::adaptor([device, non_blocking]<class R>(R&& range) {
    using Up = detail::Traits<detail::Held<R>>;
    static_assert(detail::takes_batches<detail::Held<R>>());
    static_assert(!Up::knows_place || Up::place != Place::Device,
                  "ftopt::pipeline: to_device() takes host batches: put it after batch() (and pin_memory()), once");
    return detail::mapped<Kind::Batches, Place::Device>(std::forward<R>(range),
                                                         detail::BatchToDevice{device, non_blocking});
  });
}

/// Flips, brightness, contrast and normalization on whole batches, on their device.
inline auto device_augment(DeviceAugmentOptions options) {
  ftopt::detail::check(options.mean.size() == options.std.size(), "pipeline::device_augment: mean has ",
                       options.mean.size(), " values but std has ", options.std.size());
  for (double s : options.std) ftopt::detail::check(s > 0, "pipeline::device_augment: std values must be > 0, got ", s);
  ftopt::detail::check(options.horizontal_flip >= 0 && options.horizontal_flip <= 1 && options.brightness >= 0 &&
                           options.brightness < 1 && options.contrast >= 0 && options.contrast < 1,
                       "pipeline::device_augment: horizontal_flip must be in [0, 1], brightness and contrast in "
                       "[0, 1), got ", options.horizontal_flip, ", ", options.brightness, ", ", options.contrast);
  return detail::adaptor([options = std::move(options)]<class R>(R&& range) {
    using Up = detail::Traits<detail::Held<R>>;
    static_assert(detail::takes_batches<detail::Held<R>>());
    static_assert(!Up::knows_place || Up::place == Place::Device,
                  "ftopt::pipeline: device_augment() works on batches on their device: put it after to_device()");
    return detail::mapped<Kind::Batches, Place::Device>(std::forward<R>(range), detail::AugmentBatch{options});
  });
}

} // namespace ftopt::pipeline
