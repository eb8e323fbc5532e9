#pragma once
/// quant::None: the model stays in floating point. The baseline.

#include <ftopt/quant/concept.hpp>

namespace ftopt::quant {

struct None {
  using axis = ftopt::axis::Quant;

  void prepare(torch::nn::Module&) {}
  void convert(torch::nn::Module&) {}
};

static_assert(Policy<None>);

} // namespace ftopt::quant
