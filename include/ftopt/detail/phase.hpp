#pragma once
/// detail::Phase: labels a stretch of the Trainer's work ("ftopt::forward", "ftopt::backward",
/// ...) for LibTorch's profiler, as torch.profiler.record_function does in Python. While no
/// profiler runs, a phase costs one check of the RecordFunction callbacks.
///
///   detail::Phase phase("ftopt::forward");
///   ...
///   phase.next("ftopt::backward");   // ends the forward, begins the backward

#include <optional>

#include <ATen/record_function.h>

namespace ftopt::detail {

class Phase {
public:
  explicit Phase(const char* name) { begin(name); }

  /// Ends the current phase and begins `name`.
  void next(const char* name) {
    record_.reset();
    begin(name);
  }

private:
  void begin(const char* name) {
    record_.emplace(at::RecordScope::USER_SCOPE);
    if (record_->isActive()) record_->before(name, c10::ArrayRef<const c10::IValue>{});
  }

  std::optional<at::RecordFunction> record_;
};

} // namespace ftopt::detail
