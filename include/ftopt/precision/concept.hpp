#pragma once
/// ftopt::precision::Policy: how a training step handles number formats.
///
/// Minimal complete definition, for a policy P:
///   using axis = ftopt::axis::Precision;
///   void prepare(torch::nn::Module&);            once, before the optimizer is built (e.g. cast
///                                                the weights for bf16-true training)
///   auto forward_scope() const;                  an RAII object alive during the forward
///                                                (an autocast scope, or an empty struct)
///   torch::Tensor loss_input(torch::Tensor out) const;  the model output in the loss's dtype
///   void backward(const torch::Tensor& loss);    loss.backward(), scaled if the policy scales
///   void unscale(torch::optim::Optimizer&);      before clipping: gradients back to true scale
///   bool step(torch::optim::Optimizer&);         the optimizer step; false when it was skipped
///   void update();                               after each step (e.g. the loss-scale update)
/// Optional: `void validate() const`, throwing ftopt::Error for a bad setting;
///   `torch::Tensor forward_input(const torch::Tensor&) const`, the input as the forward wants it;
///   `save_state` / `load_state`, state a checkpoint keeps (a loss scale);
///   `static constexpr bool skips_non_finite_steps = true`: the Trainer lets `step` skip a
///   non-finite step instead of stopping on a non-finite loss.
///
/// Laws:
///   - unscale, step and update run once per optimizer step, in that order, after backward;
///   - gradients seen after unscale are the true gradients of the loss;
///   - a policy that does nothing adds no work (its hooks are empty inline functions).
///
/// Models: precision::Fp32, Bf16Mixed, Fp16Mixed (loss scaling), Bf16True.

#include <concepts>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <ftopt/axis.hpp>

namespace ftopt::precision {

template <class P>
concept Policy = PolicyOf<P, axis::Precision> && std::movable<P> &&
    requires(P& p, const P& cp, torch::nn::Module& module, const torch::Tensor& t,
             torch::optim::Optimizer& optimizer) {
      p.prepare(module);
      cp.forward_scope();
      { cp.loss_input(t) } -> std::convertible_to<torch::Tensor>;
      p.backward(t);
      p.unscale(optimizer);
      { p.step(optimizer) } -> std::same_as<bool>;
      p.update();
    };

} // namespace ftopt::precision
