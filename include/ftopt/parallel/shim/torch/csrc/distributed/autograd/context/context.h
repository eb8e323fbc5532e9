#pragma once
// Stand-in for LibTorch's distributed-autograd context header, which Debian's libtorch-dev
// leaves out although c10d/reducer.hpp includes it. It declares only the two names
// reducer.hpp uses, with the real definitions' types. ftopt adds this folder with -idirafter,
// so wherever the real header is installed (the pip wheel ships it) the real one wins.
#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

namespace torch::distributed::autograd {

class DistAutogradContext {
public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

} // namespace torch::distributed::autograd
