#pragma once
/// quant::None: the model stays in floating point. The baseline.

#include <ftopt/quant/concept.hpp>

namespace ftopt::quant {

struct None {
  using axis = ftopt::axis::Quant;
  static constexpr const char* name = "none";  ///< in grids, tables and flags

  void prepare(torch::nn::Module&) {}
  void convert(torch::nn::Module&) {}
};

static_assert(Policy<None>);

} // namespace ftopt::quant
