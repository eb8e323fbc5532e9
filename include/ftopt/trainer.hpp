#pragma once
/// ftopt::Trainer<Precision, Peft, Memory, Parallel, Quant>: a training loop assembled at compile
/// time from one policy per axis. Each axis is a concept (include/ftopt/<axis>/concept.hpp);
/// the Trainer holds one policy of each and calls them through that protocol, so a policy
/// that does nothing compiles to nothing.
///
///   ftopt::Trainer<> trainer({.epochs = 3});                 // Fp32, Full, None, Single, None
///   auto& params = trainer.prepare(model);                   // attach; the trainable parameters
///   torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(1e-3));
///   auto summary = trainer.fit(model, optimizer, train_batches, ftopt::callbacks::ProgressBar{});
///   auto test = trainer.evaluate(model, test_batches);
///   trainer.finalize(model);                                  // merge adapters, quantize
///
/// One micro-batch (train_step), fully specialized:
///   precision scope { out = memory.forward(model, x); loss = loss_fn(precision.loss_input(out), y) } (the
///     loss after the scope on LibTorch 1.13: compat::loss_in_autocast)
///   parallel.before_backward; precision.backward(loss / accumulation); parallel.after_backward
///   on the last micro-batch of a window: precision.unscale; clip; lr schedule;
///   precision.step; precision.update; gradients set to none.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <ftopt/batch.hpp>
#include <ftopt/callbacks/callback.hpp>
#include <ftopt/detail/clock.hpp>
#include <ftopt/detail/phase.hpp>
#include <ftopt/trainer/slot_checks.hpp>
#include <ftopt/error.hpp>
#include <ftopt/hardware.hpp>
#include <ftopt/memory/none.hpp>
#include <ftopt/model.hpp>
#include <ftopt/parallel/single.hpp>
#include <ftopt/peft/full.hpp>
#include <ftopt/precision/fp32.hpp>
#include <ftopt/quant/none.hpp>
#include <ftopt/rules.hpp>
#include <ftopt/state.hpp>
#include <ftopt/trainer/checkpoint.hpp>
#include <ftopt/trainer/checks.hpp>
#include <ftopt/trainer/epoch.hpp>
#include <ftopt/trainer/evaluate.hpp>
#include <ftopt/trainer/gradients.hpp>
#include <ftopt/trainer/inputs.hpp>
#include <ftopt/trainer/learning_rate.hpp>
#include <ftopt/trainer/metrics.hpp>
#include <ftopt/trainer/parameter_groups.hpp>
#include <ftopt/trainer/stepping.hpp>
#include <ftopt/trainer_options.hpp>

namespace ftopt {

template <class Precision = precision::Fp32, class Peft = peft::Full, class Memory = memory::None,
          class Parallel = parallel::Single, class Quant = quant::None>
class Trainer {
  static_assert(detail::check_slots<Precision, Peft, Memory, Parallel, Quant>());
  static_assert(rules::check_combination<Precision, Peft, Memory, Parallel, Quant>());

public:
  using precision_type = Precision;
  using peft_type = Peft;
  using memory_type = Memory;
  using parallel_type = Parallel;
  using quant_type = Quant;

  /// Takes the settings and one policy per axis; throws ftopt::Error naming a bad value.
  explicit Trainer(TrainerOptions options = {}, Precision precision = {}, Peft peft = {},
                   Memory memory = {}, Parallel parallel = {}, Quant quant = {})
      : options_(std::move(options)), precision_(std::move(precision)), peft_(std::move(peft)),
        memory_(std::move(memory)), parallel_(std::move(parallel)), quant_(std::move(quant)),
        device_(options_.device.value_or(trainer::default_device())) {
    options_.validate();
    detail::validate_policies(precision_, peft_, memory_, parallel_, quant_);
    trainer::Stepping<Memory>::validate(options_);
  }

  /// Moves the model to the device and applies the policies (peft attach, quant prepare, precision
  /// prepare, memory prepare, parallel setup, the Memory policy's optimizer-in-backward attach).
  /// Returns the parameters to build the optimizer from; again for the same model, the same ones.
  template <class M>
  const std::vector<torch::Tensor>& prepare(M& model) {
    static_assert(detail::check_model<M>() && rules::check_model_for<Peft, Memory, M>());
    torch::nn::Module& module = detail::module_of(model);
    if (prepared_ == &module) return trainable_;
    module.to(device_);
    peft_.attach(module);
    quant_.prepare(module);
    precision_.prepare(module);
    if constexpr (requires { memory_.prepare(model); }) memory_.prepare(model);
    trainable_ = peft_.trainable_parameters(module);
    detail::check(!trainable_.empty(), "Trainer::prepare: the model has no trainable parameters (",
                  module.parameters().size(), " parameters, none requires grad)");
    parallel::setup(parallel_, peft_, module, trainable_);
    stepping_.attach(memory_, trainable_);
    prepared_ = &module;
    return trainable_;
  }

  /// prepare(model), then the optimizer's parameter groups, each with a copy of `defaults`: the
  /// Peft policy's (LoRA+ gives B a larger lr) or one group.
  ///   torch::optim::AdamW optimizer(trainer.parameter_groups(model, torch::optim::AdamWOptions(1e-3)));
  template <class M, class Options>
  std::vector<torch::optim::OptimizerParamGroup> parameter_groups(M& model, const Options& defaults) {
    const auto& trainable = prepare(model);
    return trainer::parameter_groups(peft_, detail::module_of(model), trainable, defaults);
  }

  /// Trains for options().epochs passes over `batches`, calling the callbacks' hooks.
  template <class M, class R, class... Callbacks>
  FitSummary fit(M& model, torch::optim::Optimizer& optimizer, R&& batches,
                 Callbacks&&... callbacks) {
    static_assert(detail::check_model<M>() && detail::check_batches<R>());
    trainer::check_prepared(prepared_ == &detail::module_of(model), trainable_, optimizer);
    auto hooks = std::forward_as_tuple(callbacks...);
    const Progress start = std::exchange(resume_.progress, Progress{});
    begin_fit(optimizer, trainer::steps_per_epoch(batches), start);
    FitSummary summary;
    const auto fit_start = detail::Clock::now();
    auto& state = metrics_.fit;
    detail::call_hooks(hooks, detail::on_fit_begin, state);
    for (std::int64_t epoch = start.epochs; epoch < options_.epochs; ++epoch) {
      metrics_.begin_epoch(epoch, device_);
      detail::module_of(model).train();
      if constexpr (requires { batches.set_epoch(std::uint64_t{}); })
        batches.set_epoch(static_cast<std::uint64_t>(epoch));
      detail::call_hooks(hooks, detail::on_epoch_begin, state);
      bool stop = trainer::run_epoch(batches, hooks, metrics_, [&](const auto& input, const auto& target, bool last) {
        train_step(model, optimizer, std::pair{input, target}, last);
      });
      if (stop && micro_ > 0) close_window();  // a window cut short: its gradients are dropped
      summary.epochs.push_back(metrics_.end_epoch(reduce_sum(), lr_.first_lr(optimizer), device_));
      progress_ = {epoch + 1, state.optimizer_steps};
      if (options_.checkpoint && parallel_.rank() == 0 && options_.checkpoint->due_after(epoch + 1, options_.epochs))
        save_checkpoint(options_.checkpoint->path, model, optimizer);
      stop |= detail::call_hooks(hooks, detail::on_epoch_end, state, summary.epochs.back());
      summary.stopped_early = stop;
      if (stop) break;
    }
    summary.seconds = detail::seconds_since(fit_start);
    detail::call_hooks(hooks, detail::on_fit_end, summary);
    return summary;
  }

  /// One micro-batch: forward, loss, backward, and the optimizer step when it closes an
  /// accumulation window (or `ends_epoch`). Needs prepare(model) first.
  template <class M, class B>
  StepResult train_step(M& model, torch::optim::Optimizer& optimizer, const B& batch,
                        bool ends_epoch = false) {
    static_assert(detail::check_model<M>() && detail::check_batch<B>());
    auto t0 = detail::Clock::now();
    detail::Phase phase("ftopt::forward");
    const torch::Tensor input = trainer::policy_input(precision_, trainer::on_device(input_of(batch), device_));
    const torch::Tensor target = trainer::on_device(target_of(batch), device_);
    const std::int64_t accumulation = memory_.accumulation();
    const bool sync = ends_epoch || micro_ + 1 == accumulation;

    parallel_.before_forward(sync);
    auto [output, loss] = trainer::output_and_loss(
        precision_, [&] { return memory_.forward(model, input); },
        [&](const torch::Tensor& out) { return options_.loss(out, target); });
    // A loss-scaling policy skips non-finite steps itself (and counts them).
    if constexpr (!rules::skips_non_finite_steps<Precision>)
      if (options_.on_non_finite_loss == NonFiniteLoss::Error) check_finite(loss);
    auto t1 = detail::Clock::now();

    phase.next("ftopt::backward");
    parallel_.before_backward(output, sync);
    const auto backward = [&] { precision_.backward(accumulation == 1 ? loss : loss / static_cast<double>(accumulation)); };
    stepping_.backward(memory_, optimizer, [&] { apply_schedule(optimizer); }, [&] {
      // A policy that communicates during backward names a lost rank if it fails (parallel::Ddp).
      if constexpr (requires { parallel_.guard(backward); }) parallel_.guard(backward);
      else backward();
    });
    parallel_.after_backward(sync);
    auto t2 = detail::Clock::now();

    ++micro_;
    phase.next("ftopt::optimizer_step");
    const bool stepped = sync && optimizer_step(optimizer);
    metrics_.record(loss, output, target, device_);
    metrics_.record_phases(t0, t1, t2, detail::Clock::now());
    return {metrics_.fit.loss, stepped};
  }

  /// Mean loss and accuracy of the model over `batches`, without gradients, in eval mode.
  template <class M, class R>
  EvalStats evaluate(M& model, R&& batches) {
    static_assert(detail::check_model<M>() && detail::check_batches<R>());
    return trainer::evaluate(model, batches, precision_, options_.loss, device_, reduce_sum());
  }

  /// After training: merges adapters (Peft) and converts to the inference model (Quant).
  template <Model M>
  void finalize(M& model) {
    torch::nn::Module& module = detail::module_of(model);
    peft_.merge(module);
    quant_.convert(module);
  }

  /// Writes model, optimizer, progress, the policies' own state and the RNG states to `path`,
  /// atomically (trainer/checkpoint.hpp): an interrupted save leaves the last good one whole.
  template <class M>
  void save_checkpoint(const std::filesystem::path& path, M& model, torch::optim::Optimizer& optimizer) const {
    static_assert(detail::check_model<M>());
    trainer::write_checkpoint(path, detail::module_of(model), optimizer, {.progress = progress_, .base_lrs = lr_.base_lrs()},
                              policies());
  }

  /// Restores what save_checkpoint wrote; the next fit continues after the checkpoint's epoch,
  /// with the same learning-rate schedule and data order as a run that was never interrupted.
  /// Returns the checkpoint's record (its format and writer, the progress).
  template <class M>
  TrainingState load_checkpoint(const std::filesystem::path& path, M& model, torch::optim::Optimizer& optimizer) {
    static_assert(detail::check_model<M>());
    resume_ = trainer::read_checkpoint(path, detail::module_of(model), optimizer, policies());
    progress_ = resume_.progress;
    return resume_;
  }

  /// Epochs and optimizer steps done by the last fit (or restored by load_checkpoint).
  Progress progress() const { return progress_; }

  const TrainerOptions& options() const { return options_; }
  torch::Device device() const { return device_; }
  const std::vector<torch::Tensor>& trainable_parameters() const { return trainable_; }
  Precision& precision() { return precision_; }
  Peft& peft() { return peft_; }
  Memory& memory() { return memory_; }
  Parallel& parallel() { return parallel_; }
  Quant& quant() { return quant_; }

private:
  auto policies() { return std::tie(precision_, peft_, memory_, parallel_, quant_); }
  auto policies() const { return std::tie(precision_, peft_, memory_, parallel_, quant_); }
  auto reduce_sum() { return [this](const torch::Tensor& t) { return parallel_.reduce_sum(t); }; }

  /// Threads (only when asked), the hardware report (once per process), the schedule, fresh metrics.
  void begin_fit(torch::optim::Optimizer& optimizer, std::optional<std::int64_t> steps, Progress start) {
    if (options_.threads) hardware::set_threads({.threads = *options_.threads});
    if (options_.report_hardware && parallel_.rank() == 0) hardware::report_once(*options_.log);
    lr_.begin_fit(options_.schedule, optimizer, options_.epochs, steps, memory_.accumulation(),
                  std::exchange(resume_.base_lrs, {}));
    metrics_.begin_fit(options_.epochs, steps, parallel_.rank(), parallel_.world_size(), start.optimizer_steps,
                       lr_.first_base_lr());
    close_window();
  }

  void check_finite(const torch::Tensor& loss) {
    const double value = loss.item<double>();
    if (std::isfinite(value)) [[likely]] return;
    close_window();
    trainer::fail_non_finite_loss(value, metrics_.fit);
  }

  /// The window's optimizer step, after or inside the backward (trainer::Stepping); whether it was taken.
  bool optimizer_step(torch::optim::Optimizer& optimizer) {
    const bool taken = stepping_.step(precision_, optimizer, trainable_, options_.clip_grad_norm,
                                      [&] { apply_schedule(optimizer); });
    metrics_.count_optimizer_step(taken);
    close_window();  // after steps in the backward: any gradient the hooks did not free
    return taken;
  }

  void apply_schedule(torch::optim::Optimizer& optimizer) {
    if (options_.schedule) metrics_.fit.lr = lr_.apply(optimizer, metrics_.fit.optimizer_steps);
  }

  /// A new accumulation window: no micro-batch in it, gradients cleared.
  void close_window() {
    micro_ = 0;
    trainer::zero_grad(parallel_, trainable_);
  }

  TrainerOptions options_;
  Precision precision_;
  Peft peft_;
  Memory memory_;
  Parallel parallel_;
  Quant quant_;
  torch::Device device_;
  const torch::nn::Module* prepared_ = nullptr;
  std::vector<torch::Tensor> trainable_;
  std::int64_t micro_ = 0;  ///< micro-batches in the open accumulation window
  trainer::Stepping<Memory> stepping_;
  trainer::Metrics metrics_;
  trainer::LearningRate lr_;
  Progress progress_;      ///< after the last epoch of the last fit
  TrainingState resume_;   ///< where the next fit starts (set by load_checkpoint)
};

} // namespace ftopt
