#pragma once
/// prefetch(workers, depth): computes what comes before it (decode, cache, augment, batch) on
/// worker threads, up to `depth` elements ahead of the consumer, and delivers them in order
/// (or as they finish, with `.ordered = false`).
///
///   for (auto& [x, y] : from(set) | shuffle(1) | augment(...) | batch(64) | prefetch({.workers = 2})) ...
///
/// An exception thrown while computing an element reaches the consumer when it asks for that
/// element. Leaving the loop early (break, an exception, a callback's Stop) destroys the pass,
/// which stops the workers and joins them: no thread outlives the loop. Counters: the time the
/// consumer waited (Stats::wait_seconds) and the passes' wall time (Stats::pass_seconds).

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <ftopt/detail/clock.hpp>
#include <ftopt/error.hpp>
#include <ftopt/pipeline/stage.hpp>

namespace ftopt::pipeline {

struct PrefetchOptions {
  int workers = 2;
  std::int64_t depth = 0;  ///< elements computed ahead of the consumer; 0: 2 * workers
  bool ordered = true;     ///< false: deliver in completion order
};

namespace detail {

template <class Up>
class Prefetched : public View {
public:
  static constexpr Kind kind = Up::kind;
  static constexpr Place place = Up::place;
  static constexpr bool indexed = false;
  using value_type = std::remove_cvref_t<decltype(std::declval<const Up&>().at(0))>;

  Prefetched() = default;
  Prefetched(Up up, PrefetchOptions options) : up_(std::move(up)), options_(options) {
    ftopt::detail::check(options_.workers >= 1, "pipeline::prefetch: workers must be >= 1, got ", options_.workers);
    ftopt::detail::check(options_.depth >= 0, "pipeline::prefetch: depth must be >= 0, got ", options_.depth);
    if (options_.depth == 0) options_.depth = 2 * options_.workers;
  }

private:
  /// One pass: the workers and the elements they finished.
  class Pass {
  public:
    Pass(const Up& up, const PrefetchOptions& options, std::shared_ptr<Stats> stats)
        : up_(up), options_(options), total_(up.size()), stats_(std::move(stats)),
          start_(ftopt::detail::Clock::now()) {
      const auto workers = std::min<std::int64_t>(options_.workers, std::max<std::int64_t>(total_, 1));
      threads_.reserve(static_cast<std::size_t>(workers));
      for (std::int64_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
    }
    ~Pass() {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      room_.notify_all();
      for (auto& t : threads_) t.join();
      add(stats_->pass_seconds, ftopt::detail::seconds_since(start_));
    }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;

    std::int64_t total() const { return total_; }

    /// The next element (in order, or the next finished); rethrows a worker's exception.
    value_type take() {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto t0 = ftopt::detail::Clock::now();
      ready_.wait(lock, [&] { return options_.ordered ? done_.count(delivered_) > 0 : !done_.empty(); });
      add(stats_->wait_seconds, ftopt::detail::seconds_since(t0));
      auto it = options_.ordered ? done_.find(delivered_) : done_.begin();
      Slot slot = std::move(it->second);
      done_.erase(it);
      ++delivered_;
      lock.unlock();
      room_.notify_all();
      if (slot.error) std::rethrow_exception(slot.error);
      return std::move(*slot.value);
    }

  private:
    struct Slot {
      std::optional<value_type> value;
      std::exception_ptr error;
    };

    void work() {
      for (;;) {
        std::int64_t k = 0;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          room_.wait(lock, [&] { return stop_ || claimed_ >= total_ || claimed_ < delivered_ + options_.depth; });
          if (stop_ || claimed_ >= total_) return;
          k = claimed_++;
        }
        Slot slot;
        try {
          slot.value.emplace(up_.at(k));
        } catch (...) {
          slot.error = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          done_.emplace(k, std::move(slot));
        }
        ready_.notify_all();
      }
    }

    const Up& up_;
    PrefetchOptions options_;
    std::int64_t total_;
    std::shared_ptr<Stats> stats_;
    ftopt::detail::Clock::time_point start_;
    std::mutex mutex_;
    std::condition_variable ready_, room_;
    std::map<std::int64_t, Slot> done_;
    std::int64_t claimed_ = 0, delivered_ = 0;
    bool stop_ = false;
    std::vector<std::thread> threads_;
  };

public:
  struct sentinel {};

  /// An input iterator; copies share the pass.
  class iterator {
  public:
    using iterator_concept = std::input_iterator_tag;
    using iterator_category = std::input_iterator_tag;  // as IndexedRange's iterator
    using value_type = Prefetched::value_type;
    using reference = const value_type&;
    using pointer = const value_type*;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(std::shared_ptr<Pass> pass) : pass_(std::move(pass)) { fetch(); }
    const value_type& operator*() const { return *current_; }
    iterator& operator++() {
      fetch();
      return *this;
    }
    void operator++(int) { fetch(); }
    friend bool operator==(const iterator& it, sentinel) { return !it.current_.has_value(); }

  private:
    void fetch() {
      current_.reset();
      if (position_ >= pass_->total()) {
        pass_.reset();  // the pass is over: join the workers now
        return;
      }
      ++position_;
      current_.emplace(pass_->take());
    }
    std::shared_ptr<Pass> pass_;
    std::optional<value_type> current_;
    std::int64_t position_ = 0;
  };

  /// The epoch the next pass runs as.
  void set_epoch(std::uint64_t epoch) { next_epoch_ = epoch; }
  iterator begin() {
    up_.prepare_pass(next_epoch_++);
    return iterator(std::make_shared<Pass>(up_, options_, up_.stats()));
  }
  sentinel end() const { return {}; }
  std::int64_t size() const { return up_.size(); }
  std::shared_ptr<Stats> stats() const { return up_.stats(); }

private:
  Up up_;
  PrefetchOptions options_;
  std::uint64_t next_epoch_ = 0;
};

} // namespace detail

/// Computes the stages before it on worker threads.
inline auto prefetch(PrefetchOptions options = {}) {
  return detail::adaptor([options]<class R>(R&& range) {
    using Up = detail::Held<R>;
    static_assert(detail::Traits<Up>::indexed, "ftopt::pipeline: prefetch() computes the indexed stages before it "
                                               "(decode_jpeg, cache, augment, batch) on workers: use it once, after "
                                               "batch(), and before pin_memory() / to_device() and any range view");
    return detail::Prefetched<Up>(detail::hold(std::forward<R>(range)), options);
  });
}

} // namespace ftopt::pipeline
