#pragma once
/// What the kernels' autograd functions share around their bodies (detail/row_kernels.hpp): the
/// float32-or-bf16 dispatch, the data as the bodies take it, the rows per task, and the in-order
/// sum of per-block partial sums that keeps a parameter's gradient independent of the thread count.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace ftopt::detail {

/// Rows per task of the row loops: about 32k elements.
inline std::int64_t row_grain(std::int64_t n) { return std::max<std::int64_t>(1, 32768 / n); }

/// fn.template operator()<T>() with T float (a float32 tensor) or std::uint16_t (bf16's bits).
template <class Fn>
void on_float_or_bf16(at::ScalarType type, Fn&& fn) {
  if (type == at::kFloat) fn.template operator()<float>();
  else fn.template operator()<std::uint16_t>();
}

/// Data of a float32 tensor as float*, of a bf16 one as its bits.
template <class T>
T* data_of(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, float>) return t.data_ptr<float>();
  else return reinterpret_cast<T*>(t.data_ptr<at::BFloat16>());
}

/// The column sums of `partial` [blocks, n] added in block order.
inline at::Tensor sum_blocks_in_order(const at::Tensor& partial) {
  const std::int64_t blocks = partial.size(0), n = partial.size(1);
  at::Tensor total = at::zeros({n}, partial.options());
  const float* pp = partial.data_ptr<float>();
  float* tp = total.data_ptr<float>();
  at::parallel_for(0, n, 64, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t b = 0; b < blocks; ++b)
      for (std::int64_t j = first; j < last; ++j) tp[j] += pp[b * n + j];
  });
  return total;
}

} // namespace ftopt::detail
