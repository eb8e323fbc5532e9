#pragma once
/// trainable_report: PEFT's print_trainable_parameters line,
///   "trainable params: 8,192 || all params: 139,018 || trainable%: 5.8928"
/// counting parameters that require grad against all parameters of the module.

#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>

#include <torch/nn/module.h>

namespace ftopt::peft {

inline std::string trainable_report(const torch::nn::Module& module) {
  std::int64_t trainable = 0, total = 0;
  for (const auto& p : module.parameters()) {
    total += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  auto grouped = [](std::int64_t n) {
    std::string digits = std::to_string(n), out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return out;
  };
  std::ostringstream s;
  s << "trainable params: " << grouped(trainable) << " || all params: " << grouped(total) << " || trainable%: "
    << std::fixed << std::setprecision(4) << (total ? 100.0 * static_cast<double>(trainable) / static_cast<double>(total) : 0.0);
  return s.str();
}

} // namespace ftopt::peft
