#pragma once
/// Which samples a pass visits, in which order: shuffle(seed) and shard(rank, world).
///
///   from(set) | shuffle(1) | shard(rank, world) | ...
///
/// shuffle: pass e is a permutation drawn from seed + e (the epoch fit sets), so runs repeat
/// exactly and a resumed run sees the order an uninterrupted one saw.
/// shard: PyTorch's DistributedSampler (drop_last=False): the order is padded by repeating its
/// start to a multiple of `world`, and rank r takes positions r, r + world, r + 2 world, ...;
/// every rank gets ceil(N / world) samples, the ranks' shares are disjoint but for the padding
/// and together cover the set. Shuffle before shard, with the same seed on every rank.
/// `shard(trainer.parallel())` takes the rank and world size from the Trainer's Parallel policy.

#include <concepts>
#include <cstdint>
#include <memory>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <ftopt/error.hpp>
#include <ftopt/pipeline/stage.hpp>

namespace ftopt::pipeline {

namespace detail {

/// An indexed stage that holds its upstream and shares its counters. By default it keeps what
/// flows, its size, its keys and its pass preparation; a stage redeclares what it changes.
template <class Up, class Derived>
class Over : public IndexedRange<Derived> {
public:
  static constexpr Kind kind = Up::kind;
  static constexpr Place place = Up::place;
  static constexpr bool indexed = true;

  Over() = default;
  explicit Over(Up up) : up_(std::move(up)) {}
  std::shared_ptr<Stats> stats() const { return up_.stats(); }
  std::int64_t size() const { return up_.size(); }
  std::int64_t key(std::int64_t k) const { return up_.key(k); }
  void prepare_pass(std::uint64_t epoch) { up_.prepare_pass(epoch); }

protected:
  Up up_;
};

template <class Up>
class Shuffled : public Over<Up, Shuffled<Up>> {
public:
  Shuffled() = default;
  Shuffled(Up up, std::uint64_t seed) : Over<Up, Shuffled<Up>>(std::move(up)), seed_(seed) {}
  auto at(std::int64_t k) const { return this->up_.at(position(k)); }
  std::int64_t key(std::int64_t k) const { return this->up_.key(position(k)); }
  void prepare_pass(std::uint64_t epoch) {
    this->up_.prepare_pass(epoch);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed_ + epoch);
    order_ = at::randperm(this->size(), generator, at::TensorOptions().dtype(at::kLong));
  }

private:
  std::int64_t position(std::int64_t k) const { return order_.data_ptr<std::int64_t>()[k]; }
  std::uint64_t seed_ = 0;
  at::Tensor order_;
};

template <class Up>
class Sharded : public Over<Up, Sharded<Up>> {
public:
  Sharded() = default;
  Sharded(Up up, std::int64_t rank, std::int64_t world)
      : Over<Up, Sharded<Up>>(std::move(up)), rank_(rank), world_(world) {
    ftopt::detail::check(world >= 1 && rank >= 0 && rank < world, "pipeline::shard: rank must be in [0, world), got rank ",
                         rank, " of world ", world);
    ftopt::detail::check(this->up_.size() >= 1, "pipeline::shard: nothing to shard (0 samples)");
  }
  std::int64_t size() const { return (this->up_.size() + world_ - 1) / world_; }
  auto at(std::int64_t k) const { return this->up_.at(position(k)); }
  std::int64_t key(std::int64_t k) const { return this->up_.key(position(k)); }

private:
  std::int64_t position(std::int64_t k) const { return (rank_ + k * world_) % this->up_.size(); }
  std::int64_t rank_ = 0, world_ = 1;
};

template <class R>
consteval bool check_order_stage() {
  static_assert(Traits<R>::indexed, "ftopt::pipeline: shuffle() and shard() choose samples before any worker runs: "
                                    "put them before prefetch() and before any range view");
  static_assert(Traits<R>::kind != Kind::Batches, "ftopt::pipeline: shuffle() and shard() order samples: put them "
                                                  "before batch()");
  return true;
}

} // namespace detail

/// A new order each pass, drawn from seed + epoch.
inline auto shuffle(std::uint64_t seed) {
  return detail::adaptor([seed]<class R>(R&& range) {
    static_assert(detail::check_order_stage<detail::Held<R>>());
    return detail::Shuffled<detail::Held<R>>(detail::hold(std::forward<R>(range)), seed);
  });
}

/// This rank's share of every pass (DistributedSampler semantics).
inline auto shard(std::int64_t rank, std::int64_t world) {
  return detail::adaptor([rank, world]<class R>(R&& range) {
    static_assert(detail::check_order_stage<detail::Held<R>>());
    return detail::Sharded<detail::Held<R>>(detail::hold(std::forward<R>(range)), rank, world);
  });
}

/// This rank's share, with the rank and world size of a Parallel policy (`trainer.parallel()`).
template <class Parallel>
  requires requires(const Parallel& p) {
    { p.rank() } -> std::convertible_to<std::int64_t>;
    { p.world_size() } -> std::convertible_to<std::int64_t>;
  }
auto shard(const Parallel& parallel) {
  return shard(static_cast<std::int64_t>(parallel.rank()), static_cast<std::int64_t>(parallel.world_size()));
}

} // namespace ftopt::pipeline
