#pragma once
/// ftopt::quant::Policy: how the model is quantized, during training (fake-quant) or after it.
///
/// Minimal complete definition, for a policy P:
///   using axis = ftopt::axis::Quant;
///   void prepare(torch::nn::Module&);            before training: insert fake-quant (QAT) or
///                                                observers (calibrated static int8)
///   void convert(torch::nn::Module&);            after training: the int8 inference model
/// Optional: `void validate() const`; `static constexpr bool fake_quant_training = true;` for a
/// policy whose training forward runs fake-quantized (the combination rules read it).
///
/// Laws:
///   - prepare leaves the float forward unchanged when no fake-quant is inserted;
///   - convert keeps the model's outputs within the policy's documented error.
///
/// Models: quant::None, quant::DynamicInt8, quant::StaticInt8, quant::Qat (their laws:
/// tests/quant/concept.cpp).

#include <concepts>

#include <torch/nn/module.h>

#include <ftopt/axis.hpp>

namespace ftopt::quant {

template <class P>
concept Policy = PolicyOf<P, axis::Quant> && std::movable<P> &&
    requires(P& p, torch::nn::Module& module) {
      p.prepare(module);
      p.convert(module);
    };

} // namespace ftopt::quant
