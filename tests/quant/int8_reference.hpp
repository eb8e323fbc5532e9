#pragma once
// What the int8 Linear kernels compute, as torch.ao.quantization defines it, for the tests of
// quant::DynamicInt8 and of the kernels behind it (quant/support/). An activation is quantized to
// quint8 from its range extended to include 0 (ATen's quant_utils::ChooseQuantizationParams:
// scale = (max - min) / 255, or / 127 with reduce_range; zero point = round(-min / scale)). The
// dynamic kernel does so per call, then computes dequant(x) . dequant(W)^T + b.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include <torch/torch.h>

namespace quant_test {

inline double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got - want).norm() / want.norm()).item<double>();
}

/// quint8 scale and zero point for the range of `t` with 0 in it, on `qmax` levels (255 or 127).
inline std::pair<double, std::int64_t> quint8_params(const torch::Tensor& t, double qmax) {
  const double lo = std::min(t.min().item<double>(), 0.0), hi = std::max(t.max().item<double>(), 0.0);
  const double scale = (hi - lo) / qmax;
  return {scale, static_cast<std::int64_t>(std::nearbyint(-lo / scale))};
}

/// What the dynamic kernel computes, from the formulas above.
inline torch::Tensor dynamic_reference(const torch::Tensor& x, const torch::Tensor& qweight, const torch::Tensor& bias,
                                       bool reduce) {
  const auto [scale, zero_point] = quint8_params(x, reduce ? 127 : 255);
  const auto xq = torch::quantize_per_tensor(x, scale, zero_point, torch::kQUInt8).dequantize();
  return torch::nn::functional::linear(xq, qweight.dequantize(), bias);
}

} // namespace quant_test
