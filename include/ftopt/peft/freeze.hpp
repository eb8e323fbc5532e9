#pragma once
/// peft::Freeze: train only some of the model, chosen by name (ftopt::nn::NamePattern: a module
/// name at any depth, a dotted suffix, or nn::regex(...)); everything else is frozen, so the
/// backward skips its weight gradients. Works on any torch::nn::Module.
///
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Freeze> trainer(
///       {}, {}, ftopt::peft::Freeze{.train = {"layer4", "fc"}});
///   ftopt::peft::Freeze{.freeze = {"embeddings", "encoder.layer.0"}};   // or name the frozen part

#include <ftopt/error.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/concept.hpp>
#include <ftopt/peft/full.hpp>

namespace ftopt::peft {

struct Freeze {
  using axis = ftopt::axis::Peft;

  /// Train only what these match (all other parameters freeze); empty: train everything
  /// that `freeze` does not name.
  nn::NamePatterns train;
  /// Freeze what these match.
  nn::NamePatterns freeze;

  void validate() const {
    ftopt::detail::check(!train.empty() || !freeze.empty(),
                         "peft::Freeze: name what to train (.train) or what to freeze (.freeze)");
  }

  void attach(torch::nn::Module& module) {
    if (!train.empty()) nn::train_only(module, train);
    if (!freeze.empty()) nn::freeze(module, freeze);
  }

  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    return Full{}.trainable_parameters(module);
  }

  void merge(torch::nn::Module&) {}
};

static_assert(Policy<Freeze>);

} // namespace ftopt::peft
