#pragma once
/// The learning-rate schedule hook, and schedule::Schedule, which holds any model of it (what
/// TrainerOptions::schedule takes). The Trainer asks it for a factor before each optimizer step
/// and sets every parameter group's lr to the group's base lr (its lr when fit began) times it.
///
/// Minimal complete definition (concept schedule::Hook): a copyable type with
///   double factor(std::int64_t step) const   // step: optimizer steps taken so far, 0-based
/// Optional:
///   void validate() const                    // throws ftopt::Error naming a bad setting
///   std::int64_t total_steps                 // the steps the schedule spans; 0 asks the
///                                            // Trainer to fill in epochs x windows per epoch
/// Laws (tests/schedule/): factor is a pure function of the step; it is >= 0; a schedule with a
/// warmup starts at 0 (Hugging Face's convention).
/// Models: WarmupCosine, WarmupLinear, ConstantWithWarmup, StepDecay; an empty Schedule is none
/// (the lr stays as the optimizer was built).
///
///   ftopt::TrainerOptions options{.schedule = ftopt::schedule::WarmupLinear{.warmup_steps = 100}};

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include <ftopt/error.hpp>

namespace ftopt::schedule {

namespace detail {

/// Hugging Face's linear warmup: step / max(1, warmup_steps), for step < warmup_steps.
inline double warmup_ramp(std::int64_t step, std::int64_t warmup_steps) {
  return static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, warmup_steps));
}

/// "schedule::<Type>: <field> must be >= 0, got <value>".
inline void check_non_negative(const char* schedule, const char* field, std::int64_t value) {
  ftopt::detail::check(value >= 0, "schedule::", schedule, ": ", field, " must be >= 0, got ", value);
}

} // namespace detail

template <class S>
concept Hook = std::copy_constructible<S> && requires(const S& s, std::int64_t step) {
  { s.factor(step) } -> std::convertible_to<double>;
};

/// A schedule whose shape depends on the length of the fit (a decay to the last step).
template <class S>
concept SpansFit = Hook<S> && requires(S& s) {
  { s.total_steps } -> std::convertible_to<std::int64_t>;
};

/// Any schedule::Hook, held by value (copies share the immutable schedule); empty means none.
class Schedule {
public:
  Schedule() = default;
  template <class S>
    requires(!std::same_as<std::remove_cvref_t<S>, Schedule> && Hook<S>)
  Schedule(S schedule) : self_(std::make_shared<const Held<S>>(std::move(schedule))) {}

  explicit operator bool() const { return self_ != nullptr; }
  /// The lr multiplier at optimizer step `step` (0-based); 1 when there is no schedule.
  double factor(std::int64_t step) const { return self_ ? self_->factor(step) : 1.0; }
  void validate() const {
    if (self_) self_->validate();
  }
  /// True when the schedule spans the fit and its total_steps is 0, to be filled in.
  bool needs_total_steps() const { return self_ && self_->needs_total_steps(); }
  /// A copy spanning `total_steps` optimizer steps (the schedule itself when it spans none).
  Schedule spanning(std::int64_t total_steps) const {
    return self_ ? self_->spanning(total_steps) : Schedule{};
  }
  /// The schedule as its own type, or null when it holds another (or none).
  template <Hook S>
  const S* get() const {
    auto held = dynamic_cast<const Held<S>*>(self_.get());
    return held ? &held->schedule : nullptr;
  }

private:
  struct Base {
    virtual ~Base() = default;
    virtual double factor(std::int64_t step) const = 0;
    virtual void validate() const = 0;
    virtual bool needs_total_steps() const = 0;
    virtual Schedule spanning(std::int64_t total_steps) const = 0;
  };
  template <class S>
  struct Held final : Base {
    explicit Held(S s) : schedule(std::move(s)) {}
    double factor(std::int64_t step) const override { return static_cast<double>(schedule.factor(step)); }
    void validate() const override {
      if constexpr (requires { schedule.validate(); }) schedule.validate();
    }
    bool needs_total_steps() const override {
      if constexpr (SpansFit<S>) return schedule.total_steps == 0;
      else return false;
    }
    Schedule spanning(std::int64_t total_steps) const override {
      S copy = schedule;
      if constexpr (SpansFit<S>) copy.total_steps = total_steps;
      return Schedule(std::move(copy));
    }
    S schedule;
  };
  std::shared_ptr<const Base> self_;
};

} // namespace ftopt::schedule
