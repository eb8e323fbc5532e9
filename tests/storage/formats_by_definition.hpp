#pragma once
// The frozen-weight formats' definitions written out element by element, for the tests that need
// an expected value computed without the code under test: NF4 as torchao's to_nf4 then
// get_original_weight (bitsandbytes' levels, blocks, double-quantized scalers) and int8 per row
// as scale = max(absmax / 127.5, eps), q = clamp(round(w / scale), -128, 127).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/storage/int8_per_channel.hpp>
#include <ftopt/storage/nf4.hpp>

namespace ftopt::test {

/// A frozen-weight format for the tests' small layers: NF4 in blocks of 64 with its scalers in
/// blocks of `scaler_block`; int8 per channel as it is.
template <class Format>
Format small_format(std::int64_t scaler_block = 4) {
  if constexpr (std::is_same_v<Format, storage::Nf4>) return storage::Nf4{.block_size = 64, .scaler_block_size = scaler_block};
  else return Format{};
}

inline std::vector<float> values_of(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

/// torchao's to_nf4 then get_original_weight, one value at a time in float32: the codes and the
/// dequantized weight.
inline std::pair<std::vector<int>, std::vector<float>> nf4_by_definition(const std::vector<float>& w, int block,
                                                                   int scaler_block) {
  const int blocks = static_cast<int>(w.size()) / block;
  std::vector<float> absmax(blocks, 0.0F);
  for (int b = 0; b < blocks; ++b)
    for (int i = 0; i < block; ++i) absmax[b] = std::max(absmax[b], std::abs(w[b * block + i]));
  float mean = 0;
  for (float a : absmax) mean += a;
  mean /= static_cast<float>(blocks);
  std::vector<float> scalers(blocks);
  for (int s = 0; s < blocks / scaler_block; ++s) {
    float largest = 0;
    for (int i = 0; i < scaler_block; ++i) largest = std::max(largest, std::abs(absmax[s * scaler_block + i] - mean));
    const float factor = 128.0F / largest;
    for (int i = 0; i < scaler_block; ++i) {
      const int b = s * scaler_block + i;
      const float q = std::clamp(std::nearbyint((absmax[b] - mean) * factor), -128.0F, 127.0F);
      scalers[b] = q / factor + mean;
    }
  }
  std::vector<int> codes(w.size());
  std::vector<float> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const int b = static_cast<int>(i) / block;
    const float x = w[i] / absmax[b];
    std::array<float, 16> distance;
    for (int k = 0; k < 16; ++k) distance[k] = std::abs(x - storage::Nf4::levels[k]);
    const int best = static_cast<int>(std::min_element(distance.begin(), distance.end()) - distance.begin());  // the first
    codes[i] = best;
    out[i] = storage::Nf4::levels[best] * scalers[b];
  }
  return {codes, out};
}


/// Int8 per row, one value at a time in float32: each value's code and each row's scale
/// (rows x cols, row-major).
inline std::pair<std::vector<float>, std::vector<float>> int8_per_row_by_definition(const std::vector<float>& w,
                                                                                     std::int64_t rows,
                                                                                     std::int64_t cols) {
  std::vector<float> codes(w.size()), scales(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    float absmax = 0;
    for (std::int64_t c = 0; c < cols; ++c) absmax = std::max(absmax, std::abs(w[r * cols + c]));
    const float scale = std::max(absmax / 127.5F, std::numeric_limits<float>::epsilon());
    scales[r] = scale;
    for (std::int64_t c = 0; c < cols; ++c)
      codes[r * cols + c] = std::clamp(std::nearbyint(w[r * cols + c] / scale), -128.0F, 127.0F);
  }
  return {codes, scales};
}

/// What `format` stores for the float matrix `w`, dequantized to float32, by the definitions above.
template <class Format>
at::Tensor dequantized_by_definition(const at::Tensor& w, const Format& format) {
  const auto v = values_of(w);
  std::vector<float> out;
  if constexpr (std::is_same_v<Format, storage::Nf4>)
    out = nf4_by_definition(v, static_cast<int>(format.block_size), static_cast<int>(format.scaler_block_size)).second;
  else {
    const auto [codes, scales] = int8_per_row_by_definition(v, w.size(0), w.size(1));
    for (std::size_t i = 0; i < codes.size(); ++i) out.push_back(codes[i] * scales[i / static_cast<std::size_t>(w.size(1))]);
  }
  return torch::tensor(out).view(w.sizes());
}

} // namespace ftopt::test
