#pragma once
/// trainer::parameter_groups: the optimizer's parameter groups for what prepare() returned, each
/// with a copy of the given options. A Peft policy with its own groups (peft::Lora under LoRA+)
/// makes them; any other policy gets one group of the trainable parameters.

#include <memory>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

namespace ftopt::trainer {

template <class Peft, class Options>
std::vector<torch::optim::OptimizerParamGroup> parameter_groups(const Peft& peft, torch::nn::Module& module,
                                                                const std::vector<torch::Tensor>& trainable,
                                                                const Options& defaults) {
  if constexpr (requires { peft.parameter_groups(module, defaults); }) {
    return peft.parameter_groups(module, defaults);
  } else {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(trainable, std::make_unique<Options>(defaults));
    return groups;
  }
}

} // namespace ftopt::trainer
