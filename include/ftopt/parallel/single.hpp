#pragma once
/// parallel::Single: one process, no communication. The baseline.
///
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::None,
///                  ftopt::parallel::Single> trainer;

#include <ftopt/parallel/concept.hpp>

namespace ftopt::parallel {

struct Single {
  using axis = ftopt::axis::Parallel;
  static constexpr const char* name = "single";  ///< in grids, tables and flags

  void setup(torch::nn::Module&, const std::vector<torch::Tensor>&) {}
  void before_forward(bool) {}
  void before_backward(const torch::Tensor&, bool) {}
  void after_backward(bool) {}
  torch::Tensor reduce_sum(const torch::Tensor& t) { return t; }
  int rank() const { return 0; }
  int world_size() const { return 1; }
};

static_assert(Policy<Single>);

} // namespace ftopt::parallel
