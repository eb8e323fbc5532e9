#pragma once
/// storage::PackedWeight and storage::Format: a frozen weight held in a compact format, and what a
/// format is. A frozen base that stays frozen (QLoRA's, peft::QLora) is stored packed and
/// dequantized for each GEMM that needs it; peft's adapter kernel (peft/kernel/adapter_linears.hpp)
/// reads any format through `Format::dequantize`. The formats:
///   storage::Int8PerChannel  one int8 value a weight, one float scale a row   (25.1% of float32)
///   storage::Nf4             4-bit NormalFloat, double-quantized block scales (12.9%)
///   storage::Q4_1            ggml's Q4_1 blocks, as GGUF files hold LLMs        (15.6%)
///
///   storage::Nf4 nf4;                               // block 64, scalers in blocks of 256
///   nf4.check(weight, "layer.0.attention.query");   // the block sizes divide it, or an error
///   storage::PackedWeight packed = nf4.quantize(weight);
///   at::Tensor w = storage::Nf4::dequantize(packed, at::kFloat);  // [out, in]

#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ftopt::storage {

/// A frozen weight in a quantized format: what Int8PerChannel or Nf4 store for it.
struct PackedWeight {
  at::Tensor data;     ///< Int8PerChannel: int8 [out, in]; Nf4: uint8 [numel / 2], two codes a byte;
                       ///< Q4_1: uint8 [out, in / 32 * 20], the blocks
  at::Tensor scales;   ///< Int8PerChannel: float32 [out]; Nf4: int8 [numel / block_size]
  at::Tensor factors;  ///< Nf4: float32 [blocks / scaler_block_size], the scalers' own scales
  at::Tensor mean;     ///< Nf4: float32 [], the scalers' mean
  std::vector<std::int64_t> shape;
  std::int64_t block_size = 0, scaler_block_size = 0;
  std::uint32_t block_type = 0;  ///< Q4_1, Ggml: the ggml type code of `data`'s blocks (storage::ggml::Type)

  /// The bytes the quantized weight occupies.
  std::int64_t bytes() const {
    std::int64_t total = 0;
    for (const auto* t : {&data, &scales, &factors, &mean})
      if (t->defined()) total += static_cast<std::int64_t>(t->nbytes());
    return total;
  }
};

/// A storage format F: `validate()` its own settings, `check(weight, module)` that it can hold a
/// weight (an error naming the module otherwise), `quantize(weight)` into a PackedWeight, and the
/// static `dequantize(packed, dtype)` back into an [out, in] tensor; `lora_name` names
/// peft::QLora over it.
template <class F>
concept Format = requires(const F& f, const at::Tensor& w, const std::string& module, const PackedWeight& p) {
  { F::lora_name } -> std::convertible_to<const char*>;
  f.validate();
  f.check(w, module);
  { f.quantize(w) } -> std::same_as<PackedWeight>;
  { F::dequantize(p, at::kFloat) } -> std::same_as<at::Tensor>;
};

} // namespace ftopt::storage
