#pragma once
/// ftopt::peft::Policy: which parameters train, and what is added to the model to train them.
///
/// Minimal complete definition, for a policy P:
///   using axis = ftopt::axis::Peft;
///   void attach(torch::nn::Module&);             once: insert adapters, set requires_grad
///   std::vector<torch::Tensor> trainable_parameters(torch::nn::Module&) const;
///                                                what the optimizer and gradient sync see
///   void merge(torch::nn::Module&);              after training: fold adapters into the base
///                                                weights for inference
/// Optional: `void validate() const`.
///
/// Laws:
///   - every trainable parameter requires grad and no other parameter does, so frozen weights
///     get no gradient and the backward skips their weight gradients;
///   - merge leaves the model's outputs unchanged (up to rounding).
///
/// Models: peft::Full, peft::Freeze, peft::Lora, peft::QLora<storage::Int8PerChannel>, peft::QLora<storage::Nf4>,
/// peft::Adapter, peft::Prefix, peft::Ia3, peft::Vera (their laws:
/// tests/peft/concept.cpp).

#include <concepts>
#include <vector>

#include <torch/nn/module.h>

#include <ftopt/axis.hpp>

namespace ftopt::peft {

template <class P>
concept Policy = PolicyOf<P, axis::Peft> && std::movable<P> &&
    requires(P& p, const P& cp, torch::nn::Module& module) {
      p.attach(module);
      { cp.trainable_parameters(module) } -> std::convertible_to<std::vector<torch::Tensor>>;
      p.merge(module);
    };

} // namespace ftopt::peft
