#pragma once
/// The machinery every Pipeline stage shares: what flows (files, samples, batches), where it
/// lives (host, pinned, device), the two kinds of stage, and the `|` that composes them.
///
/// Indexed stages (sources, shuffle, shard, decode_jpeg, cache, augment, batch) compute element
/// k of the current pass on demand, from any thread: `size()`, `at(k)`, `key(k)` (the source
/// index behind position k) and `prepare_pass(epoch)`, which runs once per pass before any
/// `at` (a shuffle draws its permutation there). Iterating one directly computes each element
/// on the consumer's thread; `prefetch(workers, depth)` computes them on worker threads.
/// Stream stages (prefetch, pin_memory, to_device, device_augment) are input ranges over what
/// comes before them.
///
/// Every stage is an adaptor with both call forms: `stage(range)` and `range | stage`. Each
/// declares, as static members, what it produces (`kind`, `place`, `indexed`), and checks at
/// compile time what it consumes, so a stage out of order fails with one sentence.

#include <atomic>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <type_traits>
#include <utility>

#include <ATen/ATen.h>

namespace ftopt::pipeline {

/// What flows through a stage.
enum class Kind {
  Files,    ///< encoded files and their labels (an ImageFolder before decode_jpeg)
  Samples,  ///< one decoded sample and its target
  Batches,  ///< (inputs, targets) pairs of stacked samples
};

/// Where a stage's batches live.
enum class Place { Host, Pinned, Device };

/// An encoded file and its class index.
struct File {
  std::filesystem::path path;
  std::int64_t label = 0;
};

/// One sample: its data (uint8 images stay uint8 until device_augment normalizes them) and its
/// target. A sample a lenient decode_jpeg could not read has undefined data; batch() leaves it out.
struct Sample {
  at::Tensor data;
  at::Tensor target;
};

using Batch = std::pair<at::Tensor, at::Tensor>;

/// Counters a pipeline keeps while it runs, shared by all its stages; read them with
/// `range.stats()`.
struct Stats {
  std::atomic<std::int64_t> samples{0};       ///< samples delivered in batches
  std::atomic<std::int64_t> batches{0};       ///< batches delivered to the consumer
  std::atomic<std::int64_t> skipped{0};       ///< files a lenient decode_jpeg could not read
  std::atomic<std::int64_t> cache_hits{0};
  std::atomic<std::int64_t> cache_misses{0};
  std::atomic<std::int64_t> decoded{0};       ///< JPEG files decoded
  std::atomic<double> wait_seconds{0};        ///< the consumer's time blocked on prefetch
  std::atomic<double> pass_seconds{0};        ///< wall time of the passes so far (prefetched)

  /// Samples per second over the prefetched passes so far.
  double samples_per_second() const {
    const double s = pass_seconds.load();
    return s > 0 ? static_cast<double>(samples.load()) / s : 0.0;
  }
  /// The fraction of the passes' wall time the consumer spent waiting for data.
  double wait_fraction() const {
    const double s = pass_seconds.load();
    return s > 0 ? wait_seconds.load() / s : 0.0;
  }
};

namespace detail {

inline void add(std::atomic<double>& total, double value) {
  double seen = total.load();
  while (!total.compare_exchange_weak(seen, seen + value)) {
  }
}

/// What every indexed stage offers.
template <class S>
concept IndexedStage = requires(const S& s, S& m, std::int64_t k, std::uint64_t epoch) {
  { s.size() } -> std::convertible_to<std::int64_t>;
  s.at(k);
  m.prepare_pass(epoch);
  { s.stats() } -> std::convertible_to<std::shared_ptr<Stats>>;
  requires S::indexed;
};

/// Iterating an indexed stage on the consumer's thread: begin() starts a pass (the epoch set by
/// set_epoch, then the next one), each dereference computes at(k). Derived provides size(),
/// at(k) and prepare_pass(epoch).
template <class Derived>
class IndexedRange {
public:
  class iterator {
  public:
    using value_type = std::remove_cvref_t<decltype(std::declval<const Derived&>().at(0))>;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(const Derived* owner, std::int64_t k) : owner_(owner), k_(k) {}
    value_type operator*() const { return owner_->at(k_); }
    iterator& operator++() {
      ++k_;
      return *this;
    }
    void operator++(int) { ++k_; }
    bool operator==(const iterator& other) const { return k_ == other.k_; }

  private:
    const Derived* owner_ = nullptr;
    std::int64_t k_ = 0;
  };

  /// The epoch the next pass runs as (fit calls it; DistributedSampler's set_epoch).
  void set_epoch(std::uint64_t epoch) { next_epoch_ = epoch; }
  iterator begin() {
    self().prepare_pass(next_epoch_++);
    return {&self(), 0};
  }
  iterator end() { return {&self(), self().size()}; }

private:
  Derived& self() { return static_cast<Derived&>(*this); }
  std::uint64_t next_epoch_ = 0;
};

/// The closure of an adaptor: applied to a range it builds the stage.
template <class Make>
struct Adaptor {
  Make make;
  template <class R>
  auto operator()(R&& range) const {
    return make(std::forward<R>(range));
  }
};

template <class T>
struct is_adaptor : std::false_type {};
template <class Make>
struct is_adaptor<Adaptor<Make>> : std::true_type {};

template <class Make>
Adaptor<Make> adaptor(Make make) {
  return {std::move(make)};
}

/// A stage holds what comes before it by value: pipelines are built from temporaries and
/// lvalues alike, and a copied stage shares its sources' data (tensors, paths), not its state.
template <class R>
using Held = std::remove_cvref_t<R>;

} // namespace detail

/// range | stage
template <class R, class A>
  requires detail::is_adaptor<std::remove_cvref_t<A>>::value
auto operator|(R&& range, A&& stage) {
  return stage(std::forward<R>(range));
}

} // namespace ftopt::pipeline
