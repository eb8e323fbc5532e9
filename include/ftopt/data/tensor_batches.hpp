#pragma once
/// TensorBatches: mini-batches from tensors held in memory, reshuffled each pass (epoch).
/// A sized, re-iterable range of (input, target) pairs, so fit can run several epochs over it;
/// pass e is shuffled with seed + e.
/// (The Pipeline, with workers, caching and device stages, builds on the same idea.)
///
///   ftopt::data::TensorBatches train(images, labels, {.batch_size = 64, .seed = 1});
///   for (auto [x, y] : train) { ... }           // x: [64, ...], y: [64]

#include <cstdint>
#include <iterator>
#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <ftopt/error.hpp>

namespace ftopt::data {

struct TensorBatchesOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;
  std::uint64_t seed = 0;   ///< pass e uses seed + e, so runs repeat exactly
  bool drop_last = false;   ///< drop a last batch smaller than batch_size
};

class TensorBatches {
public:
  using Batch = std::pair<at::Tensor, at::Tensor>;

  TensorBatches(at::Tensor inputs, at::Tensor targets, TensorBatchesOptions options = {})
      : inputs_(std::move(inputs)), targets_(std::move(targets)), options_(options) {
    ftopt::detail::check(options_.batch_size >= 1,
                         "TensorBatches: batch_size must be >= 1, got ", options_.batch_size);
    ftopt::detail::check(inputs_.dim() >= 1 && targets_.dim() >= 1 &&
                             inputs_.size(0) == targets_.size(0),
                         "TensorBatches: inputs and targets need the same first dimension, got ",
                         inputs_.sizes(), " and ", targets_.sizes());
  }

  class iterator {
  public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;

    iterator() = default;
    iterator(const TensorBatches* owner, at::Tensor order, std::int64_t batch)
        : owner_(owner), order_(std::move(order)), batch_(batch) {}

    Batch operator*() const {
      const std::int64_t size = owner_->options_.batch_size;
      const std::int64_t start = batch_ * size;
      const std::int64_t length = std::min(size, owner_->inputs_.size(0) - start);
      if (!order_.defined())
        return {owner_->inputs_.narrow(0, start, length), owner_->targets_.narrow(0, start, length)};
      at::Tensor index = order_.narrow(0, start, length);
      return {owner_->inputs_.index_select(0, index), owner_->targets_.index_select(0, index)};
    }
    iterator& operator++() {
      ++batch_;
      return *this;
    }
    void operator++(int) { ++batch_; }
    bool operator==(const iterator& other) const { return batch_ == other.batch_; }

  private:
    const TensorBatches* owner_ = nullptr;
    at::Tensor order_;
    std::int64_t batch_ = 0;
  };

  /// The epoch the next pass shuffles for (DistributedSampler's set_epoch): fit calls it, so a
  /// resumed run sees the same order as an uninterrupted one. Each pass advances it by one.
  void set_epoch(std::uint64_t epoch) { epoch_ = epoch; }

  /// Starts a pass: a new permutation when shuffling, drawn from seed + epoch.
  iterator begin() const {
    at::Tensor order;
    if (options_.shuffle) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(options_.seed + epoch_++);
      order = at::randperm(inputs_.size(0), generator, at::TensorOptions().dtype(at::kLong));
    }
    return {this, order, 0};
  }
  iterator end() const { return {this, {}, size_()}; }
  std::size_t size() const { return static_cast<std::size_t>(size_()); }

private:
  std::int64_t size_() const {
    const std::int64_t n = inputs_.size(0), b = options_.batch_size;
    return options_.drop_last ? n / b : (n + b - 1) / b;
  }

  at::Tensor inputs_, targets_;
  TensorBatchesOptions options_;
  mutable std::uint64_t epoch_ = 0;
};

} // namespace ftopt::data
