#pragma once
/// The device type a module's parameters live on (the CPU for a module without parameters): the
/// device a precision policy's autocast scope must cover.

#include <torch/nn/module.h>

namespace ftopt::detail {

inline c10::DeviceType device_of(const torch::nn::Module& module) {
  for (const auto& p : module.parameters()) return p.device().type();
  return c10::DeviceType::CPU;
}

} // namespace ftopt::detail
