#pragma once
/// peft::Full: full fine-tuning; every parameter that requires grad trains. The baseline.
/// Parameters a user froze by hand (requires_grad false) stay frozen.
///
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full> trainer;

#include <ftopt/peft/concept.hpp>

namespace ftopt::peft {

struct Full {
  using axis = ftopt::axis::Peft;
  static constexpr const char* name = "full";  ///< in grids, tables and flags

  void attach(torch::nn::Module&) {}

  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    std::vector<torch::Tensor> trainable;
    for (auto& p : module.parameters())
      if (p.requires_grad()) trainable.push_back(p);
    return trainable;
  }

  void merge(torch::nn::Module&) {}
};

static_assert(Policy<Full>);

} // namespace ftopt::peft
