#pragma once
// Side-by-side timing for Google Benchmark: each iteration runs every contender once, in an
// order that rotates from one iteration to the next, so machine noise and cache warmth fall on
// all of them alike. Counters: each contender's median time (µs) and its ratio to the first.
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include <ftopt/memory/peak.hpp>

namespace ftopt::bench {

struct Contender {
  std::string name;
  std::function<void()> step;
};

inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

/// Warms each contender up `warmup` times, then times them in rotation while the state runs.
inline void side_by_side(benchmark::State& state, const std::vector<Contender>& contenders, int warmup = 3) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i)
    for (const auto& c : contenders) c.step();
  std::vector<std::vector<double>> seconds(contenders.size());
  std::size_t first = 0;
  for (auto _ : state) {
    for (std::size_t k = 0; k < contenders.size(); ++k) {
      const std::size_t i = (first + k) % contenders.size();
      const auto t0 = Clock::now();
      contenders[i].step();
      seconds[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    first = (first + 1) % contenders.size();
  }
  const double base = median(seconds[0]);
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    const double m = median(seconds[i]);
    state.counters[contenders[i].name + "_us"] = m * 1e6;
    if (i > 0) state.counters[contenders[i].name + "_ratio"] = m / base;
  }
}

/// Peak live CPU tensor MiB of one call, above what was live before it (memory::PeakMemory).
inline double peak_mib(const std::function<void()>& step) {
  ftopt::memory::PeakMemory::reset();
  step();
  return static_cast<double>(ftopt::memory::PeakMemory::peak()) / (1 << 20);
}

/// One more step of each contender, measured: counters <name>_peak_MiB.
inline void record_peaks(benchmark::State& state, const std::vector<Contender>& contenders) {
  for (const auto& c : contenders) state.counters[c.name + "_peak_MiB"] = peak_mib(c.step);
}

} // namespace ftopt::bench
