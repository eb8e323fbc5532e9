#pragma once
/// Where the Trainer steps the optimizer, as its Memory policy says (memory/concept.hpp): after
/// the backward of an accumulation window's last micro-batch (unscale, clip, schedule, step,
/// update), or, for a policy that declares steps_in_backward (memory::OptimizerInBackward),
/// inside the backward, each parameter as soon as its gradient is complete. The Trainer calls
/// either through the same four calls (validate, attach, backward, step); nothing else in it
/// knows which it has.

#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>

#include <ftopt/detail/clip_grad_norm.hpp>
#include <ftopt/detail/scope_exit.hpp>
#include <ftopt/error.hpp>
#include <ftopt/memory/concept.hpp>
#include <ftopt/rules.hpp>
#include <ftopt/trainer_options.hpp>

namespace ftopt::trainer {

/// After the backward.
template <class Memory>
class Stepping {
public:
  static void validate(const TrainerOptions&) {}
  void attach(Memory&, const std::vector<torch::Tensor>&) {}

  /// Runs the backward (`run`); `schedule` sets a step's learning rate.
  template <class Schedule, class Run>
  void backward(Memory&, torch::optim::Optimizer&, Schedule&&, Run&& run) {
    run();
  }

  /// After a window's last backward: unscale, clip, schedule, step, update; whether the
  /// precision policy took the step.
  template <class Precision, class Schedule>
  bool step(Precision& precision, torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& trainable,
            double clip_grad_norm, Schedule&& schedule) {
    precision.unscale(optimizer);
    if (clip_grad_norm > 0) detail::clip_grad_norm(trainable, clip_grad_norm);
    schedule();
    const bool taken = precision.step(optimizer);
    precision.update();
    return taken;
  }
};

/// Inside the backward, through the policy's attach/arm/disarm (memory::StepsInBackward).
template <class Memory>
  requires rules::steps_in_backward<Memory>
class Stepping<Memory> {
public:
  static void validate(const TrainerOptions& options) {
    detail::check(options.clip_grad_norm == 0, "ftopt::Trainer: TrainerOptions::clip_grad_norm = ",
                  options.clip_grad_norm, " cannot combine with stepping the optimizer in the backward (",
                  Memory::name, "): clipping by the global norm needs every gradient before the first "
                  "step; set clip_grad_norm = 0, or clip without ", Memory::name);
  }
  void attach(Memory& memory, const std::vector<torch::Tensor>& trainable) { memory.attach(trainable); }

  /// The parameters step inside this backward, at this step's learning rate: `schedule` first.
  template <class Schedule, class Run>
  void backward(Memory& memory, torch::optim::Optimizer& optimizer, Schedule&& schedule, Run&& run) {
    schedule();
    memory.arm(optimizer);
    const detail::ScopeExit disarm([&] { stepped_ = memory.disarm() > 0; });
    run();
  }

  /// Whether any parameter stepped in the last backward.
  template <class Precision, class Schedule>
  bool step(Precision&, torch::optim::Optimizer&, const std::vector<torch::Tensor>&, double, Schedule&&) {
    return std::exchange(stepped_, false);
  }

private:
  bool stepped_ = false;
};

} // namespace ftopt::trainer
