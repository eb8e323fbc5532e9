#pragma once
/// detail::EvalScope: a module in eval mode for a scope, its own mode given back after, also when
/// the scope ends by an exception (evaluation, generation).

#include <torch/nn/module.h>

namespace ftopt::detail {

class EvalScope {
public:
  explicit EvalScope(torch::nn::Module& module) : module_(module), training_(module.is_training()) { module_.eval(); }
  ~EvalScope() { module_.train(training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

private:
  torch::nn::Module& module_;
  bool training_;
};

} // namespace ftopt::detail
