#pragma once
/// One epoch's pass over the batches, as Trainer::fit runs it: each batch's wait for data timed
/// (and labelled `ftopt::data` for the profiler), the last batch flagged so that its
/// accumulation window closes, and the callbacks' on_step_end asked whether to stop.

#include <optional>
#include <ranges>
#include <utility>

#include <ATen/core/Tensor.h>

#include <ftopt/batch.hpp>
#include <ftopt/callbacks/callback.hpp>
#include <ftopt/detail/clock.hpp>
#include <ftopt/detail/phase.hpp>
#include <ftopt/error.hpp>
#include <ftopt/trainer/metrics.hpp>

namespace ftopt::trainer {

/// `step(input, target, last)` trains on each batch of `batches`; true when a callback stopped
/// the fit (after that batch).
template <class R, class Hooks, class Step>
bool run_epoch(R& batches, Hooks& hooks, Metrics& metrics, Step&& step) {
  auto wait_start = detail::Clock::now();
  auto it = std::ranges::begin(batches);
  const auto end = std::ranges::end(batches);
  check(it != end, "Trainer::fit: the batch range is empty in epoch ", metrics.fit.epoch);
  while (it != end) {
    std::optional<detail::Phase> waiting(std::in_place, "ftopt::data");
    decltype(auto) batch = *it;
    const at::Tensor input = input_of(batch), target = target_of(batch);
    ++it;
    const bool last = it == end;
    waiting.reset();
    metrics.phases.data += detail::seconds_since(wait_start);
    step(input, target, last);
    metrics.end_micro_batch();
    if (detail::call_hooks(hooks, detail::on_step_end, metrics.fit)) return true;
    wait_start = detail::Clock::now();
  }
  return false;
}

} // namespace ftopt::trainer
