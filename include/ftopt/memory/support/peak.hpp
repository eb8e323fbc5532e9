#pragma once
/// Peak memory of the tensors a piece of work allocates: on the CPU through a tracking allocator
/// wrapped around LibTorch's (LibTorch 1.13 has no CPU memory statistics), on CUDA from the
/// caching allocator's own statistics. What oneDNN or BLAS allocate for themselves is not seen.
///
///   ftopt::memory::PeakMemory::reset();
///   ... train ...
///   std::size_t bytes = ftopt::memory::PeakMemory::peak();   // since reset, above its start

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/Device.h>
#if defined(FTOPT_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

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

/// Peak live tensor memory on a device, from anywhere: the tracking allocator on the CPU, the
/// caching allocator's statistics on CUDA (builds with FTOPT_WITH_CUDA, which ftopt's CMake
/// package defines for a CUDA LibTorch).
struct PeakMemory {
  /// Whether peaks can be measured on `device` in this build.
  static bool supported(c10::Device device = c10::Device(c10::DeviceType::CPU)) {
#if defined(FTOPT_WITH_CUDA)
    if (device.is_cuda()) return true;
#endif
    return device.is_cpu();
  }
  /// Starts a new peak from what is live now (on the CPU, installs the tracker once).
  static void reset(c10::Device device = c10::Device(c10::DeviceType::CPU)) {
#if defined(FTOPT_WITH_CUDA)
    if (device.is_cuda()) {
      const auto index = cuda_index(device);
      c10::cuda::CUDACachingAllocator::resetPeakStats(index);
      baseline(c10::Device(c10::DeviceType::CUDA, index)) = static_cast<std::size_t>(cuda_allocated(index).current);
      return;
    }
#endif
    if (!device.is_cpu()) return;
    auto& tracker = detail::TrackingAllocator::instance();
    tracker.reset_peak();
    baseline(device) = tracker.current();
  }
  /// Highest live tensor bytes since reset(), above what was live at reset(); 0 where not
  /// supported().
  static std::size_t peak(c10::Device device = c10::Device(c10::DeviceType::CPU)) {
    std::size_t high = 0;
#if defined(FTOPT_WITH_CUDA)
    if (device.is_cuda()) {
      device = c10::Device(c10::DeviceType::CUDA, cuda_index(device));
      high = static_cast<std::size_t>(cuda_allocated(device.index()).peak);
    }
#endif
    if (device.is_cpu()) high = detail::TrackingAllocator::instance().peak();
    return high > baseline(device) ? high - baseline(device) : 0;
  }
  /// Live CPU tensor bytes now (allocated since the tracker was installed).
  static std::size_t current() { return detail::TrackingAllocator::instance().current(); }

private:
  static std::size_t& baseline(c10::Device device) {
    static std::size_t cpu = 0;
    static std::array<std::size_t, 64> cuda{};
    return device.is_cuda() ? cuda.at(static_cast<std::size_t>(std::max<int>(device.index(), 0))) : cpu;
  }
#if defined(FTOPT_WITH_CUDA)
  static c10::DeviceIndex cuda_index(c10::Device device) {
    return device.has_index() ? device.index() : c10::cuda::current_device();
  }
  struct AllocatedBytes {
    std::int64_t current, peak;
  };
  /// The aggregate (all pools) allocated-bytes statistic, which every LibTorch version keeps first
  /// (its type moved between 1.13 and 2.x).
  static AllocatedBytes cuda_allocated(c10::DeviceIndex index) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    return {stats.allocated_bytes[0].current, stats.allocated_bytes[0].peak};
  }
#endif
};

} // namespace ftopt::memory
