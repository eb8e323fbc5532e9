#pragma once
// Side-by-side timing for Google Benchmark: each iteration runs every contender once, in an
// order that rotates from one iteration to the next, so machine noise and cache warmth fall on
// all of them alike. Counters: each contender's median time (µs) and its ratio to the first.
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/memory/support/peak.hpp>

namespace ftopt::bench {

struct Contender {
  std::string name;
  std::function<void()> step;
};

inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

/// Seconds one call of `run` takes.
template <class Run>
double seconds_of(Run&& run) {
  const auto t0 = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// One round of in_rotation: every turn once, starting at turn `first` (then one later).
inline void rotate_once(const std::vector<std::function<double()>>& turns, std::size_t& first,
                        std::chrono::milliseconds pause, std::vector<std::vector<double>>& seconds) {
  for (std::size_t k = 0; k < turns.size(); ++k) {
    const std::size_t i = (first + k) % turns.size();
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    seconds[i].push_back(turns[i]());
  }
  first = (first + 1) % turns.size();
}

/// Runs every turn once per iteration of the state, starting one turn later each iteration; each
/// turn returns the seconds it measured (its own clock, or another process's report). Returns
/// each turn's measurements. `pause` is slept before each turn: where turns run in different
/// processes, the OpenMP threads of the one that just ran spin on the CPUs for a while after its
/// last parallel region (libgomp's default wait policy; tens of ms where `pause` is slow), and
/// the pause lets them go to sleep, so each turn runs as it would alone.
inline std::vector<std::vector<double>> in_rotation(benchmark::State& state,
                                                    const std::vector<std::function<double()>>& turns,
                                                    std::chrono::milliseconds pause = std::chrono::milliseconds(0)) {
  std::vector<std::vector<double>> seconds(turns.size());
  std::size_t first = 0;
  for (auto _ : state) rotate_once(turns, first, pause, seconds);
  return seconds;
}

/// in_rotation for `rounds` rounds outside the state's loop: for a benchmark that times several
/// groups of turns, one after the other, in one run.
inline std::vector<std::vector<double>> in_rotation(const std::vector<std::function<double()>>& turns, int rounds,
                                                    std::chrono::milliseconds pause = std::chrono::milliseconds(0)) {
  std::vector<std::vector<double>> seconds(turns.size());
  std::size_t first = 0;
  for (int r = 0; r < rounds; ++r) rotate_once(turns, first, pause, seconds);
  return seconds;
}

/// Warms each contender up `warmup` times, then times them in rotation while the state runs.
inline void side_by_side(benchmark::State& state, const std::vector<Contender>& contenders, int warmup = 3) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& c : contenders) c.step();
  std::vector<std::function<double()>> turns;
  for (const auto& c : contenders) turns.push_back([&c] { return seconds_of(c.step); });
  const auto seconds = in_rotation(state, turns);
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

/// A contender's step for a loss over `hidden`: the loss under CPU bf16 autocast, its backward
/// outside the scope (as the Trainer runs it), hidden's gradient dropped after.
template <class Loss>
std::function<void()> bf16_loss_step(const at::Tensor& hidden, Loss loss) {
  return [hidden, loss] {
    at::Tensor value;
    {
      ftopt::compat::AutocastScope autocast(c10::DeviceType::CPU, at::kBFloat16);
      value = loss();
    }
    value.backward();
    hidden.mutable_grad().reset();
  };
}

} // namespace ftopt::bench
