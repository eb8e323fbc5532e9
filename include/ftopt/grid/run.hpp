#pragma once
/// Running a grid: each valid combination trains a fresh model for a fixed number of steps
/// and is evaluated on held-out data after Trainer::finalize (adapters merged, int8 converted),
/// against the fp32 full fine-tuning baseline run first in the same process. `autotune` does
/// the same within a time budget, taking the precisions and the Peft policies in turn, and picks the fastest
/// combination whose accuracy stays within the bound.
///
///   auto report = grid::run<Grid>(make_model, train_batches, test_batches,
///                                 {.steps = 60, .lr = 1e-3}, grid::Settings(lora, adapter));
///   auto choice = grid::autotune<Grid>(make_model, train_batches, test_batches,
///                                      {.steps = 30, .budget_seconds = 120});
///   choice.best;       // a grid::Combination; Grid::visit(choice.best, f) trains it for real
///   choice.evidence;   // the report it was chosen from
///
/// A combination that throws (a policy that refuses the model, say) is reported "not run" with
/// the error, and the others go on.

#include <algorithm>
#include <chrono>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/optim/adamw.h>

#include <ftopt/callbacks/callback.hpp>
#include <ftopt/grid/grid.hpp>
#include <ftopt/grid/report.hpp>
#include <ftopt/trainer.hpp>

namespace ftopt::grid {

/// A setting of policy P under a name that a grid::Variants entry of the grid lists.
template <class P>
struct Named {
  std::string name;
  P policy;
};

/// The policy objects a grid constructs its Trainers from: a policy given here is copied into
/// every combination that uses its type under its own name; a grid::Named<P> into the
/// combinations that name it; any other policy is default-constructed.
template <class... Given>
class Settings {
public:
  explicit Settings(Given... given) : given_(std::move(given)...) {}

  /// The P given, else P{}.
  template <class P>
  P get() const {
    if constexpr ((std::is_same_v<P, Given> || ...)) return std::get<P>(given_);
    else return P{};
  }
  /// The P given as grid::Named under `name`; for P's own name, get<P>(). Any other name is an
  /// ftopt::Error naming it and the policy type.
  template <class P>
  P get(const std::string& name) const {
    std::optional<P> named;
    std::apply([&](const auto&... given) { (pick(given, name, named), ...); }, given_);
    if (named) return *std::move(named);
    ftopt::detail::check(name == name_of<P>(), "grid::Settings: no grid::Named<", name_of<P>(), "> named '", name,
                         "' was given");
    return get<P>();
  }

  /// A Trainer T whose five policies come from these settings, by type.
  template <class T>
  T trainer(TrainerOptions options) const {
    return T(std::move(options), get<typename T::precision_type>(), get<typename T::peft_type>(),
             get<typename T::memory_type>(), get<typename T::parallel_type>(), get<typename T::quant_type>());
  }
  /// The Trainer T of `combination`: each policy by its type and the name the combination gives it.
  template <class T>
  T trainer(TrainerOptions options, const Combination& combination) const {
    return T(std::move(options), get<typename T::precision_type>(combination.precision),
             get<typename T::peft_type>(combination.peft), get<typename T::memory_type>(combination.memory),
             get<typename T::parallel_type>(combination.parallel), get<typename T::quant_type>(combination.quant));
  }

private:
  template <class P, class G>
  static void pick(const G& given, const std::string& name, std::optional<P>& named) {
    if constexpr (std::is_same_v<G, Named<P>>)
      if (!named && given.name == name) named = given.policy;
  }

  std::tuple<Given...> given_;
};

/// What a combination's optimizer is made from: the parameters Trainer::prepare returned, and
/// the Peft policy's parameter groups for AdamW's options (one group, or LoRA+'s three).
struct Trainable {
  std::vector<torch::Tensor> parameters;
  std::function<std::vector<torch::optim::OptimizerParamGroup>(const torch::optim::AdamWOptions&)> adamw_groups;
};

using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(const Trainable&, double lr)>;

/// AdamW with weight decay 0.05, the main job's optimizer, over the Peft policy's groups.
inline std::unique_ptr<torch::optim::Optimizer> adamw(const Trainable& trainable, double lr) {
  const auto options = torch::optim::AdamWOptions(lr).weight_decay(0.05);
  return std::make_unique<torch::optim::AdamW>(trainable.adamw_groups(options), options);
}

struct RunOptions {
  TrainerOptions trainer;       ///< epochs are set from `steps`; a schedule spans `steps`
  std::int64_t steps = 40;      ///< training micro-batches per combination
  double lr = 1e-3;
  /// Learning-rate multipliers by Peft policy name: adapters want a larger rate than full
  /// fine-tuning (HF PEFT's examples use ~10x; the main job uses 3x).
  std::map<std::string, double> lr_scale{{"lora", 3.0}, {"adapter", 3.0}, {"prefix", 3.0}};
  double bound = 0.005;         ///< accuracy drop flagged, and the most autotune accepts
  double budget_seconds = 0;    ///< autotune: no combination starts after this long (0: no limit)
  OptimizerFactory optimizer = adamw;
  std::ostream* log = nullptr;  ///< one line per combination when set

  /// The learning rate for a combination: lr times its Peft policy's lr_scale (1 if none).
  double lr_for(const Combination& combination) const {
    const auto scale = lr_scale.find(combination.peft);
    return lr * (scale == lr_scale.end() ? 1.0 : scale->second);
  }

  void validate() const {
    ftopt::detail::check(steps >= 2, "grid::RunOptions: steps must be >= 2 (the first step is not timed), got ",
                         steps);
    ftopt::detail::check(lr > 0, "grid::RunOptions: lr must be > 0, got ", lr);
    ftopt::detail::check(bound >= 0, "grid::RunOptions: bound must be >= 0, got ", bound);
    ftopt::detail::check(budget_seconds >= 0, "grid::RunOptions: budget_seconds must be >= 0, got ", budget_seconds);
    ftopt::detail::check(static_cast<bool>(optimizer), "grid::RunOptions: optimizer is empty");
  }
};

namespace detail {

/// Times each training step after the first, and stops fit after `steps`.
struct StepClock {
  std::int64_t steps;
  std::int64_t done = 0;
  std::chrono::steady_clock::time_point first_end;
  double timed_seconds = 0;  ///< from the end of the first step to the end of the last

  Signal on_step_end(const FitState&) {
    const auto now = std::chrono::steady_clock::now();
    if (++done == 1) first_end = now;
    else timed_seconds = std::chrono::duration<double>(now - first_end).count();
    return done >= steps ? Signal::Stop : Signal::Continue;
  }
};

} // namespace detail

/// Trains and evaluates one combination (Trainer type T) on a fresh model.
template <class T, class MakeModel, class Train, class Test, class S>
Result run_one(const Combination& combination, MakeModel& make_model, Train& train, Test& test,
               const RunOptions& options, const S& settings) {
  Result result{.combination = combination};
  try {
    auto model = make_model();
    TrainerOptions trainer_options = options.trainer;
    trainer_options.report_hardware = false;
    const std::int64_t per_epoch = static_cast<std::int64_t>(std::ranges::size(train));
    ftopt::detail::check(per_epoch > 0, "grid: the training batches are empty");
    trainer_options.epochs = (options.steps + per_epoch - 1) / per_epoch;
    if (trainer_options.schedule.needs_total_steps())
      trainer_options.schedule = trainer_options.schedule.spanning(options.steps);
    T trainer = settings.template trainer<T>(trainer_options, combination);
    const auto& params = trainer.prepare(model);
    const Trainable trainable{params, [&](const torch::optim::AdamWOptions& defaults) {
                                return trainer.parameter_groups(model, defaults);
                              }};
    auto optimizer = options.optimizer(trainable, options.lr_for(combination));
    detail::StepClock clock{options.steps};
    const FitSummary fit = trainer.fit(model, *optimizer, train, clock);
    std::size_t peak = 0;
    std::int64_t samples = 0, steps = 0;
    for (const auto& e : fit.epochs) {
      peak = std::max(peak, e.peak_memory);
      samples += e.samples;
      steps += e.steps;
    }
    ftopt::detail::check(clock.done >= 2, "grid: ", combination.key(), " ran fewer than 2 steps");
    result.step_ms = 1e3 * clock.timed_seconds / static_cast<double>(clock.done - 1);
    result.samples_per_second = static_cast<double>(samples) / static_cast<double>(steps) / (result.step_ms / 1e3);
    result.peak_mib = static_cast<double>(peak) / (1 << 20);
    for (const auto& p : params) result.trainable += p.numel();
    trainer.finalize(model);
    const EvalStats eval = trainer.evaluate(model, test);
    result.accuracy = eval.accuracy.value_or(0);
    result.inference_ms = 1e3 * eval.seconds;
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  if (options.log) {
    *options.log << "grid: " << combination.key();
    if (result.ran())
      *options.log << ": " << result.step_ms << " ms/step, accuracy " << 100 * result.accuracy << "%\n";
    else *options.log << ": not run: " << result.error << '\n';
  }
  return result;
}

namespace detail {

/// `combinations` grouped by `key`: the groups in order of first appearance, each in the given order.
template <class Key>
std::vector<std::vector<Combination>> grouped(const std::vector<Combination>& combinations, Key key) {
  std::vector<std::vector<Combination>> groups;
  for (const auto& c : combinations) {
    auto same = std::ranges::find_if(groups, [&](const auto& group) { return key(group.front()) == key(c); });
    if (same == groups.end()) groups.push_back({c});
    else same->push_back(c);
  }
  return groups;
}

/// `combinations` grouped by `key` and taken from the groups in turn: the first of each group,
/// then the second of each, ...
template <class Key>
std::vector<Combination> in_turn(const std::vector<Combination>& combinations, Key key) {
  const auto groups = grouped(combinations, key);
  std::vector<Combination> out;
  for (std::size_t turn = 0; out.size() < combinations.size(); ++turn)
    for (const auto& group : groups)
      if (turn < group.size()) out.push_back(group[turn]);
  return out;
}

/// autotune's order: the precisions in turn (fp32's first, bf16's first, fp32's second, ...),
/// and within each precision its Peft policies in turn (every policy with the other axes at
/// their first values before any policy with a second one). A budget that ends part-way has
/// tried every precision and every Peft policy before variations of the Memory and Quant axes.
inline std::vector<Combination> autotune_order(const std::vector<Combination>& combinations) {
  const auto precision = [](const Combination& c) { return c.precision; };
  std::vector<Combination> pefts_in_turn;
  for (const auto& own : grouped(combinations, precision))
    std::ranges::copy(in_turn(own, [](const Combination& c) { return c.peft; }), std::back_inserter(pefts_in_turn));
  return in_turn(pefts_in_turn, precision);
}

template <class G, class MakeModel, class Train, class Test, class S>
Report run_grid(MakeModel& make_model, Train& train, Test& test, const RunOptions& options, const S& settings,
                bool budgeted) {
  options.validate();
  using M = std::remove_cvref_t<decltype(make_model())>;
  Report report;
  report.bound = options.bound;
  report.excluded = G::template excluded<M>();
  const auto start = std::chrono::steady_clock::now();
  const Combination baseline;
  report.results.push_back(run_one<Trainer<>>(baseline, make_model, train, test, options, settings));
  ftopt::detail::check(report.results.front().ran(), "grid: the baseline (", baseline.key(),
                       ") failed: ", report.results.front().error);
  const auto run_next = [&]<class T>(const Combination& c) {
    if (c == baseline) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (budgeted && options.budget_seconds > 0 && elapsed > options.budget_seconds) {
      report.results.push_back({.combination = c, .error = "the time budget was spent"});
      return;
    }
    report.results.push_back(run_one<T>(c, make_model, train, test, options, settings));
  };
  if (budgeted)
    for (const auto& c : autotune_order(G::template combinations<M>())) G::template visit<M>(c, run_next);
  else G::template for_each<M>(run_next);
  report.mark();
  return report;
}

} // namespace detail

/// Runs every valid combination of grid G (and the baseline first) on fresh models from
/// `make_model`: `options.steps` training steps on `train` (a sized batch range), evaluation on
/// `test`. The report is marked (flagged, Pareto).
template <class G, class MakeModel, class Train, class Test, class S = Settings<>>
Report run(MakeModel make_model, Train&& train, Test&& test, const RunOptions& options = {}, const S& settings = S{}) {
  return detail::run_grid<G>(make_model, train, test, options, settings, /*budgeted=*/false);
}

struct Choice {
  Combination best;  ///< the fastest combination within the bound (the baseline when none is)
  Report evidence;
};

/// Runs the grid briefly (options.steps per combination, within options.budget_seconds) on the
/// user's model and data, and chooses the fastest combination whose held-out accuracy is within
/// options.bound of the baseline's.
template <class G, class MakeModel, class Train, class Test, class S = Settings<>>
Choice autotune(MakeModel make_model, Train&& train, Test&& test, const RunOptions& options = {},
                const S& settings = S{}) {
  Report report = detail::run_grid<G>(make_model, train, test, options, settings, /*budgeted=*/true);
  Combination best = report.fastest_within_bound().combination;
  return {std::move(best), std::move(report)};
}

} // namespace ftopt::grid
