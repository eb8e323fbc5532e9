#pragma once
/// Peak memory of the tensors a piece of work allocates: on the CPU through a tracking allocator
/// wrapped around LibTorch's (LibTorch 1.13 has no CPU memory statistics), on CUDA from the
/// caching allocator's own statistics. What oneDNN or BLAS allocate for themselves is not seen.
///
///   ftopt::memory::PeakMemory::reset();
///   ... train ...
///   std::size_t bytes = ftopt::memory::PeakMemory::peak();   // since reset, above its start

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace ftopt::memory {

namespace detail {

/// Forwards to LibTorch's CPU allocator and counts live bytes. Installed once, on first use,
/// for the whole process; allocations made before it are not counted.
class TrackingAllocator final : public c10::Allocator {
public:
  explicit TrackingAllocator(c10::Allocator* inner) : inner_(inner) {}

  // LibTorch 1.13 declares allocate const, 2.x non-const; one of these two overrides.
  c10::DataPtr allocate(std::size_t n) const { return track(n); }
  c10::DataPtr allocate(std::size_t n) { return track(n); }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  // Pure virtual on 2.x only.
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

  std::size_t current() const { return current_.load(); }
  std::size_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

  static TrackingAllocator& instance() {
    static TrackingAllocator* installed = [] {
      auto* tracker = new TrackingAllocator(c10::GetDefaultCPUAllocator());  // lives for the process
      c10::SetCPUAllocator(tracker, /*priority=*/10);
      return tracker;
    }();
    return *installed;
  }

private:
  c10::DataPtr track(std::size_t n) const {
    void* data = inner_->raw_allocate(n);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[data] = n;
    }
    const std::size_t now = current_.fetch_add(n) + n;
    std::size_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  static void release(void* data) {
    auto& self = instance();
    std::size_t n = 0;
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      auto it = self.sizes_.find(data);
      if (it != self.sizes_.end()) {
        n = it->second;
        self.sizes_.erase(it);
      }
    }
    self.current_.fetch_sub(n);
    self.inner_->raw_deallocate(data);
  }

  c10::Allocator* inner_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, std::size_t> sizes_;
  mutable std::atomic<std::size_t> current_{0}, peak_{0};
};

} // namespace detail

/// The tracker's view, from anywhere.
struct PeakMemory {
  /// Installs the tracker (once) and starts a new peak from what is live now.
  static void reset() {
    auto& tracker = detail::TrackingAllocator::instance();
    tracker.reset_peak();
    baseline() = tracker.current();
  }
  /// Highest live CPU tensor bytes since reset(), above what was live at reset().
  static std::size_t peak() {
    auto& tracker = detail::TrackingAllocator::instance();
    return tracker.peak() > baseline() ? tracker.peak() - baseline() : 0;
  }
  /// Live CPU tensor bytes now (allocated since the tracker was installed).
  static std::size_t current() { return detail::TrackingAllocator::instance().current(); }

private:
  static std::size_t& baseline() {
    static std::size_t value = 0;
    return value;
  }
};

} // namespace ftopt::memory
