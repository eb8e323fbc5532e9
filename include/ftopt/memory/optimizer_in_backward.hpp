#pragma once
/// memory::OptimizerInBackward<Inner>: each trainable parameter is stepped by the optimizer as soon
/// as its gradient is complete during the backward, and its gradient freed right after, so the
/// gradients never all live at once (torchtune's optimizer_in_bwd; PyTorch's "optimizer step in
/// backward" recipe). Peak memory then holds the gradients still in flight instead of one per
/// trainable parameter; with full fine-tuning that is the size of the model in fp32.
///
///   ftopt::Trainer<ftopt::precision::Bf16Mixed, ftopt::peft::Full, ftopt::memory::OptimizerInBackward<>> trainer(opts);
///   ftopt::optim::AdamW8bit optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-3));
///   trainer.fit(model, optimizer, batches);                     // steps inside each backward
///
/// How: a post-hook on each trainable parameter's gradient accumulator (the autograd node that
/// writes .grad), as c10d's Reducer hooks DDP's buckets, calls optimizer.step() while that
/// parameter is the only one with a gradient (every other one is either not reached yet or
/// stepped and freed), then sets its gradient to none. Any torch::optim::Optimizer works (AdamW,
/// FusedAdamW, AdamW8bit, SGD) with its param groups; the Trainer sets the learning rate of the
/// schedule before the backward instead of after it. The forward is Inner's (memory::None, or
/// memory::Checkpoint to recompute blocks as well).
///
/// What cannot combine with it, because a step then needs every gradient first:
///   - gradient accumulation (Inner's `.accumulate` above 1) and clipping by the global norm
///     (TrainerOptions::clip_grad_norm): refused when the Trainer is built, naming the value;
///   - loss scaling (precision::Fp16Mixed: a step is skipped when any gradient is inf/NaN) and
///     DDP (gradients are all-reduced in buckets after they are complete): refused at compile time
///     by ftopt/rules.hpp, with a sentence.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>

#include <ftopt/error.hpp>
#include <ftopt/memory/concept.hpp>
#include <ftopt/memory/none.hpp>
#include <ftopt/model.hpp>

namespace ftopt::memory {

namespace detail {

/// The hooks on the gradient accumulators and the optimizer they step while armed.
class BackwardSteps {
public:
  /// Hooks every tensor of `params` (once; their gradient accumulators are kept alive, so the
  /// same ones serve every backward).
  void attach(const std::vector<at::Tensor>& params, std::shared_ptr<BackwardSteps> self) {
    ftopt::detail::check(accumulators_.empty(), "memory::OptimizerInBackward: already attached to a model");
    for (const auto& p : params) {
      auto accumulator = torch::autograd::impl::grad_accumulator(p);
      ftopt::detail::check(accumulator != nullptr,
                           "memory::OptimizerInBackward: a trainable tensor does not require grad");
      accumulator->add_post_hook(std::make_unique<Hook>(self, p));
      accumulators_.push_back(std::move(accumulator));
    }
  }
  void arm(torch::optim::Optimizer& optimizer) {
    optimizer_ = &optimizer;
    stepped_ = 0;
  }
  /// Ends the backward; returns how many parameters were stepped in it.
  std::int64_t disarm() {
    optimizer_ = nullptr;
    return stepped_;
  }

private:
  struct Hook : torch::autograd::FunctionPostHook {
    Hook(std::weak_ptr<BackwardSteps> owner, at::Tensor param) : owner(std::move(owner)), param(std::move(param)) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list& /*inputs*/) override {
      const auto steps = owner.lock();
      if (!steps || steps->optimizer_ == nullptr || !param.grad().defined()) return outputs;
      steps->optimizer_->step();  // this parameter's gradient is the only one defined
      param.mutable_grad().reset();
      ++steps->stepped_;
      return outputs;
    }
    std::weak_ptr<BackwardSteps> owner;
    at::Tensor param;
  };

  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  torch::optim::Optimizer* optimizer_ = nullptr;
  std::int64_t stepped_ = 0;
};

} // namespace detail

template <Policy Inner = None>
class OptimizerInBackward {
public:
  using axis = ftopt::axis::Memory;
  static constexpr const char* name = "optimizer-in-backward";  ///< in grids, tables and flags
  /// The Trainer steps the optimizer inside the backward (rules.hpp, trainer.hpp).
  static constexpr bool steps_in_backward = true;
  static constexpr bool needs_checkpointable_blocks = requires { requires Inner::needs_checkpointable_blocks; };

  OptimizerInBackward(Inner inner = {}) : inner_(std::move(inner)) {}  // NOLINT: implicit, for {...}
  // A copy is a new policy for another Trainer: the settings, not the hooks.
  OptimizerInBackward(const OptimizerInBackward& other) : inner_(other.inner_) {}
  OptimizerInBackward& operator=(const OptimizerInBackward& other) {
    inner_ = other.inner_;
    steps_ = std::make_shared<detail::BackwardSteps>();
    return *this;
  }
  OptimizerInBackward(OptimizerInBackward&&) noexcept = default;
  OptimizerInBackward& operator=(OptimizerInBackward&&) noexcept = default;
  ~OptimizerInBackward() = default;

  void validate() const {
    if constexpr (requires { inner_.validate(); }) inner_.validate();
    ftopt::detail::check(inner_.accumulation() == 1, "memory::OptimizerInBackward: gradient accumulation (accumulate = ",
                         inner_.accumulation(), ") cannot combine with stepping the optimizer in the backward: "
                         "a step would need the whole window's gradients; use accumulate = 1, or accumulate "
                         "without memory::OptimizerInBackward");
  }

  template <Model M>
  torch::Tensor forward(M& model, const torch::Tensor& input) {
    return inner_.forward(model, input);
  }
  template <class M>
    requires requires(Inner& inner, M& model) { inner.prepare(model); }
  void prepare(M& model) {
    inner_.prepare(model);
  }

  std::int64_t accumulation() const { return 1; }

  /// Hooks the trainable parameters (Trainer::prepare).
  void attach(const std::vector<at::Tensor>& trainable) { steps_->attach(trainable, steps_); }
  /// Steps `optimizer` in the backward that follows, until disarm (Trainer::train_step).
  void arm(torch::optim::Optimizer& optimizer) { steps_->arm(optimizer); }
  std::int64_t disarm() { return steps_->disarm(); }

  const Inner& inner() const { return inner_; }

private:
  Inner inner_;
  std::shared_ptr<detail::BackwardSteps> steps_ = std::make_shared<detail::BackwardSteps>();
};

static_assert(Policy<OptimizerInBackward<>>);

} // namespace ftopt::memory
