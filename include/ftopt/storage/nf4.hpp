#pragma once
/// storage::Nf4: a frozen weight in 4-bit NormalFloat (Dettmers et al. 2023; bitsandbytes' and
/// torchao's NF4): the weight, flattened row-major, in blocks of `block_size` (64) values; each
/// value the nearest of the 16 NF4 levels to w / absmax_block (ties to the lower level), two codes
/// per byte, the first in the high nibble. Double quantization as torchao's to_nf4 does it: the
/// block absmaxes less their mean, in blocks of `scaler_block_size` (256), each scaled by 128 / its
/// block's largest magnitude, rounded and clamped to int8; dequantized as q / factor + mean.
/// 4 + 8/64 + 32/(64*256) bits per value: 12.9% of float32.

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <ftopt/error.hpp>
#include <ftopt/storage/packed.hpp>

namespace ftopt::storage {

struct Nf4 {
  static constexpr const char* lora_name = "lora-nf4";  ///< peft::QLora's name over this format
  /// The 16 levels, normalized to [-1, 1]: bitsandbytes' create_normal_map(offset = 0.9677083),
  /// quantiles of the standard normal, 8 positive and 7 negative besides 0 (float32).
  static constexpr std::array<float, 16> levels = {
      -1.0F, -0.6961928009986877F, -0.5250730514526367F, -0.39491748809814453F, -0.28444138169288635F,
      -0.18477343022823334F, -0.09105003625154495F, 0.0F, 0.07958029955625534F, 0.16093020141124725F,
      0.24611230194568634F, 0.33791524171829224F, 0.44070982933044434F, 0.5626170039176941F,
      0.7229568362236023F, 1.0F};

  std::int64_t block_size = 64;          ///< values per absmax (QLoRA's and torchao's 64)
  std::int64_t scaler_block_size = 256;  ///< absmaxes per int8 factor (torchao's 256)

  void validate() const {
    ftopt::detail::check(block_size > 0 && block_size % 2 == 0,
                         "storage::Nf4: block_size must be a positive even number, got ", block_size);
    ftopt::detail::check(scaler_block_size > 0, "storage::Nf4: scaler_block_size must be > 0, got ", scaler_block_size);
  }

  /// The weight splits into whole blocks, and its blocks into whole scaler blocks.
  void check(const at::Tensor& weight, const std::string& module) const {
    const std::int64_t n = weight.numel();
    ftopt::detail::check(n % block_size == 0, "storage::Nf4: block_size = ", block_size, " does not divide the ", n,
                         " values of '", module, "' (", weight.sizes(), "); choose a block size that divides it");
    ftopt::detail::check((n / block_size) % scaler_block_size == 0, "storage::Nf4: scaler_block_size = ",
                         scaler_block_size, " does not divide the ", n / block_size, " blocks of '", module, "' (",
                         weight.sizes(), " in blocks of ", block_size, "); choose one that divides it");
  }

  PackedWeight quantize(const at::Tensor& weight) const {
    const at::Tensor w = weight.detach().to(at::kFloat).contiguous().view({-1, block_size});
    const at::Tensor absmax = w.abs().amax(1);
    // Double quantization of the absmaxes (torchao's double_quantize_scalers).
    const at::Tensor mean = absmax.mean();
    const at::Tensor centered = (absmax - mean).view({-1, scaler_block_size});
    const at::Tensor factors = 128.0 / centered.abs().amax(1).clamp_min(tiny);
    const at::Tensor scales = (centered * factors.unsqueeze(1)).round().clamp(-128, 127).to(at::kChar).view(-1);
    // The nearest level to each value over its block's absmax (an all-zero block codes 0).
    const at::Tensor scaled = (w / absmax.clamp_min(tiny).unsqueeze(1)).view(-1);
    const at::Tensor table = level_table(scaled.device(), at::kFloat);
    at::Tensor codes = at::empty(scaled.sizes(), scaled.options().dtype(at::kByte));
    constexpr std::int64_t chunk = 1 << 18;  // [chunk, 16] distances at a time
    for (std::int64_t begin = 0; begin < scaled.numel(); begin += chunk) {
      const std::int64_t length = std::min(chunk, scaled.numel() - begin);
      codes.narrow(0, begin, length)
          .copy_((scaled.narrow(0, begin, length).unsqueeze(1) - table).abs().argmin(1));
    }
    const at::Tensor pairs = codes.view({-1, 2});
    return {.data = pairs.select(1, 0).bitwise_left_shift(4).bitwise_or(pairs.select(1, 1)).contiguous(),
            .scales = scales,
            .factors = factors,
            .mean = mean,
            .shape = weight.sizes().vec(),
            .block_size = block_size,
            .scaler_block_size = scaler_block_size};
  }

  /// The weight in `dtype`: on the CPU in float32 or bf16 one pass over the codes (each block's
  /// 16 levels scaled once, then looked up); elsewhere in ATen ops. The same values either way.
  static at::Tensor dequantize(const PackedWeight& packed, at::ScalarType dtype) {
    const at::Tensor absmax = (packed.scales.to(at::kFloat).view({-1, packed.scaler_block_size}) /
                               packed.factors.to(at::kFloat).unsqueeze(1))
                                  .view(-1) +
                              packed.mean.to(at::kFloat);
    if (packed.data.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16))
      return dequantize_cpu(packed, absmax.contiguous(), dtype);
    const at::Tensor codes = at::stack({packed.data.bitwise_right_shift(4), packed.data.bitwise_and(15)}, 1);
    const at::Tensor values = level_table(packed.data.device(), at::kFloat).index_select(0, codes.view(-1).to(at::kLong));
    return (values.view({-1, packed.block_size}) * absmax.unsqueeze(1)).view(packed.shape).to(dtype);
  }

  static at::Tensor level_table(c10::Device device, at::ScalarType dtype) {
    return at::tensor(at::ArrayRef<float>(levels.data(), levels.size()), at::kFloat).to(device, dtype);
  }

private:
  static constexpr double tiny = std::numeric_limits<float>::min();

  static at::Tensor dequantize_cpu(const PackedWeight& packed, const at::Tensor& absmax, at::ScalarType dtype) {
    const at::Tensor data = packed.data.contiguous();
    at::Tensor out = at::empty(packed.shape, data.options().dtype(dtype));
    const std::uint8_t* codes = data.data_ptr<std::uint8_t>();
    const float* scale = absmax.data_ptr<float>();
    const std::int64_t half = packed.block_size / 2;
    const auto run = [&]<class T>(T* values) {
      at::parallel_for(0, absmax.numel(), 64, [&](std::int64_t begin, std::int64_t end) {
        std::array<T, 16> table;
        for (std::int64_t b = begin; b < end; ++b) {
          for (std::size_t k = 0; k < 16; ++k) table[k] = static_cast<T>(levels[k] * scale[b]);
          const std::uint8_t* in = codes + b * half;
          T* to = values + b * 2 * half;
          for (std::int64_t i = 0; i < half; ++i) {
            to[2 * i] = table[in[i] >> 4];
            to[2 * i + 1] = table[in[i] & 15];
          }
        }
      });
    };
    if (dtype == at::kFloat) run(out.data_ptr<float>());
    else run(out.data_ptr<at::BFloat16>());
    return out;
  }
};

static_assert(Format<Nf4>);

} // namespace ftopt::storage
