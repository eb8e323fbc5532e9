#pragma once
/// The machinery every Pipeline stage shares: what flows (texts, files, samples, batches), where it
/// lives (host, pinned, device), the two kinds of stage, and how they compose.
///
/// Indexed stages (sources, shuffle, shard, decode_jpeg, cache, augment, batch) compute element
/// k of the current pass on demand, from any thread: `size()`, `at(k)`, `key(k)` (the source
/// index behind position k) and `prepare_pass(epoch)`, which runs once per pass before any
/// `at` (a shuffle draws its permutation there). Iterating one directly computes each element
/// on the consumer's thread; `prefetch(workers, depth)` computes them on worker threads.
/// Stream stages (prefetch, pin_memory, to_device, device_augment) are input ranges over what
/// comes before them.
///
/// Every stage is a range-v3 view, and every stage function returns a range-v3 view closure:
/// `stage(range)` and `range | stage` build it, and closures compose before any source exists
/// (`auto prep = decode_jpeg() | augment(o) | batch(64); auto batches = folder | prep;`), with
/// each other and with range-v3's own adaptors. Each stage declares, as static members, what it
/// produces (`kind`, `place`, `indexed`), and checks at compile time what it consumes, so a
/// stage out of order fails with one sentence. A range view between stages (range-v3's, or any
/// range of files, samples or batches) counts by its element type; it is not indexed, so it
/// can feed the stream stages only, and ftopt does not know where its batches live.

#include <atomic>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <ranges>

#include <range/v3/range/concepts.hpp>
#include <range/v3/view/all.hpp>
#include <range/v3/view/view.hpp>

#include <ATen/ATen.h>

namespace ftopt::pipeline {

/// What flows through a stage.
enum class Kind {
  Texts,    ///< texts and their labels (a Texts source before tokenize)
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

/// A text (UTF-8) and its class index.
struct Text {
  std::string text;
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
/// The base of every stage: a view to range-v3 and to std::ranges alike.
struct View : ranges::view_base, std::ranges::view_base {};

template <class Derived>
class IndexedRange : public View {
public:
  class iterator {
  public:
    // The C++17 member types too: range-v3 wraps iterators (counted_iterator in views::take)
    // by their std::iterator_traits.
    using iterator_concept = std::input_iterator_tag;
    using iterator_category = std::input_iterator_tag;
    using value_type = std::remove_cvref_t<decltype(std::declval<const Derived&>().at(0))>;
    using reference = value_type;
    using pointer = void;
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

/// A stage function's result: a range-v3 view closure that builds the stage from a range.
template <class Make>
auto adaptor(Make make) {
  return ranges::make_view_closure(std::move(make));
}

/// ftopt's own stages declare what they produce.
template <class R>
concept Stage = requires {
  { R::kind } -> std::convertible_to<Kind>;
  { R::place } -> std::convertible_to<Place>;
  { R::indexed } -> std::convertible_to<bool>;
};

/// What flows through a range that is not a stage, from its element type.
template <class R>
consteval Kind element_kind() {
  using E = std::remove_cvref_t<ranges::range_reference_t<R>>;
  static_assert(std::is_same_v<E, Text> || std::is_same_v<E, File> || std::is_same_v<E, Sample> ||
                    std::is_same_v<E, Batch>,
                "ftopt::pipeline: a range between stages must yield pipeline::Text, pipeline::File, "
                "pipeline::Sample or pipeline::Batch (an (inputs, targets) pair)");
  if constexpr (std::is_same_v<E, Text>) return Kind::Texts;
  else if constexpr (std::is_same_v<E, File>) return Kind::Files;
  else if constexpr (std::is_same_v<E, Sample>) return Kind::Samples;
  else return Kind::Batches;
}

/// What a stage learns of the range before it: a stage's own declarations, or, for any other
/// range, its element kind, not indexed, and no known place.
template <class R>
struct Traits {
  static constexpr Kind kind = element_kind<R>();
  static constexpr bool indexed = false;
  static constexpr bool knows_place = false;
  static constexpr Place place = Place::Host;
};
template <Stage R>
struct Traits<R> {
  static constexpr Kind kind = R::kind;
  static constexpr bool indexed = R::indexed;
  static constexpr bool knows_place = true;
  static constexpr Place place = R::place;
};

/// A stage holds what comes before it by value: a stage itself (pipelines are built from
/// temporaries and lvalues alike, and a copied stage shares its sources' data, tensors and
/// paths, not its state), or any other range as range-v3's views::all holds it.
template <class R>
struct HeldAs {
  using type = decltype(ranges::views::all(std::declval<R>()));
};
template <class R>
  requires Stage<std::remove_cvref_t<R>>
struct HeldAs<R> {
  using type = std::remove_cvref_t<R>;
};
template <class R>
using Held = typename HeldAs<R>::type;

template <class R>
Held<R> hold(R&& range) {
  if constexpr (Stage<std::remove_cvref_t<R>>) return std::forward<R>(range);
  else return ranges::views::all(std::forward<R>(range));
}

} // namespace detail

/// A const stage (`const ImageFolder folder(...); folder | prep`) is piped as a copy: range-v3
/// takes only ranges it can iterate, and a stage's begin() starts a pass, so it is not const.
/// A copy shares the stage's data.
template <detail::Stage R, class F>
auto operator|(const R& range, ranges::views::view_closure<F> stage) {
  return stage(R(range));
}

} // namespace ftopt::pipeline
