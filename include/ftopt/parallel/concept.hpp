#pragma once
/// ftopt::parallel::Policy: how ranks share the work and agree on gradients and metrics.
///
/// Minimal complete definition, for a policy P:
///   using axis = ftopt::axis::Parallel;
///   void setup(torch::nn::Module&, const std::vector<torch::Tensor>& trainable);
///                                                once, after the model is on its device: join
///                                                the process group, broadcast the weights,
///                                                hook the gradient reduction
///   void before_forward(bool sync);              sync: this micro-batch ends an optimizer step
///   void before_backward(const torch::Tensor& output, bool sync);
///   void after_backward(bool sync);              gradients are reduced when this returns, if sync
///   torch::Tensor reduce_sum(const torch::Tensor&);   the sum over ranks (metrics)
///   int rank() const;  int world_size() const;
/// Optional: `void validate() const`;
///   `void setup(module, trainable, const std::vector<std::string>& constant)`
///                                      also told which buffers, by name, never change after
///                                      setup (those a Peft policy's `constant_buffers()` names:
///                                      QLora's packed bases), which the Trainer passes;
///   `void guard(F&& f)`                runs the backward (f) and turns a communication failure
///                                      into an error that names the lost rank;
///   `bool zero_grads_in_place() const` the gradients alias communication buffers: the Trainer
///                                      zeroes them instead of dropping them.
///
/// Laws:
///   - after after_backward(true) every rank holds the same gradients: the mean over ranks of
///     the gradients it would hold alone;
///   - after_backward(false) leaves gradients local (DDP's no_sync for accumulation);
///   - reduce_sum on one rank is the identity.
///
/// Models: parallel::Single (<ftopt/parallel/single.hpp>), parallel::Ddp (<ftopt/parallel/ddp.hpp>,
/// which <ftopt.hpp> leaves out with c10d; declared here so that a Trainer naming it without its
/// header says which header to include).

#include <concepts>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include <ftopt/axis.hpp>

namespace ftopt::parallel {

class Ddp;  // defined in <ftopt/parallel/ddp.hpp>

template <class P>
concept Policy = PolicyOf<P, axis::Parallel> && std::movable<P> &&
    requires(P& p, const P& cp, torch::nn::Module& module, const std::vector<torch::Tensor>& ts,
             const torch::Tensor& t, bool sync) {
      p.setup(module, ts);
      p.before_forward(sync);
      p.before_backward(t, sync);
      p.after_backward(sync);
      { p.reduce_sum(t) } -> std::convertible_to<torch::Tensor>;
      { cp.rank() } -> std::convertible_to<int>;
      { cp.world_size() } -> std::convertible_to<int>;
    };

/// Sets `parallel` up for `module`, telling it the buffers `peft` keeps constant where the one
/// names some and the other takes them (the Trainer's prepare).
template <class Parallel, class Peft>
void setup(Parallel& parallel, const Peft& peft, torch::nn::Module& module, const std::vector<torch::Tensor>& trainable) {
  if constexpr (requires(const std::vector<std::string>& names) {
                  { peft.constant_buffers() } -> std::convertible_to<std::vector<std::string>>;
                  parallel.setup(module, trainable, names);
                })
    parallel.setup(module, trainable, peft.constant_buffers());
  else
    parallel.setup(module, trainable);
}

} // namespace ftopt::parallel
