#pragma once
/// memory::None: the plain forward, every activation kept for the backward. The baseline.
/// Gradient accumulation works here too: `memory::None{.accumulate = 4}` steps the optimizer
/// once per 4 micro-batches, each loss divided by 4 (Lightning's accumulate_grad_batches).
///
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::None> trainer(
///       {}, {}, {}, ftopt::memory::None{.accumulate = 4});

#include <ftopt/error.hpp>
#include <ftopt/memory/concept.hpp>

namespace ftopt::memory {

struct None {
  using axis = ftopt::axis::Memory;
  static constexpr const char* name = "none";  ///< in grids, tables and flags

  /// Micro-batches per optimizer step.
  std::int64_t accumulate = 1;

  void validate() const {
    ftopt::detail::check(accumulate >= 1, "memory::None: accumulate must be >= 1, got ", accumulate);
  }

  template <Model M>
  torch::Tensor forward(M& model, const torch::Tensor& input) {
    return model->forward(input);
  }

  std::int64_t accumulation() const { return accumulate; }
};

static_assert(Policy<None>);

} // namespace ftopt::memory
