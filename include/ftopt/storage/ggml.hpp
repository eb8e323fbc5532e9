#pragma once
/// ggml's tensor types (llama.cpp's ggml.h, `enum ggml_type`; the block layouts of
/// ggml-common.h): what a GGUF tensor's bytes hold, and their float values. A quantized row is a
/// run of blocks of `block_values` values each; a row's values never share a block with the
/// next row's, so rows can be taken, permuted or dequantized on their own.
///   Q8_0  32 values in 34 bytes: fp16 d, 32 int8 q;            w = d q
///   Q4_0  32 values in 18 bytes: fp16 d, 16 bytes of nibbles;  w = d (q - 8)
///   Q4_1  32 values in 20 bytes: fp16 d, fp16 m, 16 bytes;     w = d q + m
///   Q5_0  32 values in 22 bytes: fp16 d, 4 bytes of fifth bits, 16 bytes of nibbles;
///                                                               w = d (q - 16)
///   Q5_1  32 values in 24 bytes: fp16 d, fp16 m, 4 bytes of fifth bits, 16 bytes of nibbles;
///                                                               w = d q + m
///   Q4_K  256 values in 144 bytes: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins for 8
///         sub-blocks of 32, 128 bytes of nibbles;               w = d sc q - dmin m
///   Q6_K  256 values in 210 bytes: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8
///         scales for sub-blocks of 16, fp16 d;                  w = d sc (q - 32)
/// In a 4-bit block, byte j holds value j in its low nibble and value j + 16 in its high one (the
/// K-quants as ggml-quants.c's dequantize_row_q4_K and _q6_K lay theirs out). In a 5-bit block,
/// bit j of the little-endian 32-bit word of fifth bits is value j's, over its nibble.
///
/// quantize() writes the 32-value types as llama.cpp's quantize_row_*_ref (ggml-quants.c) does;
/// the K-quants are read, not written.
///
///   auto w = storage::ggml::dequantize(bytes, storage::ggml::Type::Q4_1, {576, 576}, at::kFloat);
///   auto blocks = storage::ggml::quantize(w, storage::ggml::Type::Q5_0);   // uint8 [576, 18 * 22]

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <ftopt/error.hpp>

namespace ftopt::storage::ggml {

/// ggml's type codes as GGUF files store them (uint32).
enum class Type : std::uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10, Q3_K = 11,
  Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

/// How a type lays its values out: values per block, bytes per block, and whether ftopt reads it.
struct Layout {
  const char* name;
  std::int64_t block_values;
  std::int64_t block_bytes;
  bool readable;
};

/// The layout of type code `code`, or nothing for a code ggml does not have (or no longer has).
inline std::optional<Layout> layout(std::uint32_t code) {
  switch (static_cast<Type>(code)) {
  case Type::F32: return Layout{"F32", 1, 4, true};
  case Type::F16: return Layout{"F16", 1, 2, true};
  case Type::BF16: return Layout{"BF16", 1, 2, true};
  case Type::Q8_0: return Layout{"Q8_0", 32, 34, true};
  case Type::Q4_0: return Layout{"Q4_0", 32, 18, true};
  case Type::Q4_1: return Layout{"Q4_1", 32, 20, true};
  case Type::Q5_0: return Layout{"Q5_0", 32, 22, true};
  case Type::Q5_1: return Layout{"Q5_1", 32, 24, true};
  case Type::Q8_1: return Layout{"Q8_1", 32, 36, false};
  case Type::Q2_K: return Layout{"Q2_K", 256, 84, false};
  case Type::Q3_K: return Layout{"Q3_K", 256, 110, false};
  case Type::Q4_K: return Layout{"Q4_K", 256, 144, true};
  case Type::Q5_K: return Layout{"Q5_K", 256, 176, false};
  case Type::Q6_K: return Layout{"Q6_K", 256, 210, true};
  case Type::Q8_K: return Layout{"Q8_K", 256, 292, false};
  case Type::I8: return Layout{"I8", 1, 1, false};
  case Type::I16: return Layout{"I16", 1, 2, false};
  case Type::I32: return Layout{"I32", 1, 4, false};
  case Type::I64: return Layout{"I64", 1, 8, false};
  case Type::F64: return Layout{"F64", 1, 8, false};
  }
  return std::nullopt;
}

/// The types dequantize() reads, for error messages.
inline constexpr const char* readable_types = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K";
/// The types quantize() writes.
inline constexpr const char* writable_types = "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1";

/// The name of type `type` ("Q5_0"), or its number where ggml has no such type.
inline std::string name_of(Type type) {
  const auto kind = layout(static_cast<std::uint32_t>(type));
  return kind ? kind->name : "type " + std::to_string(static_cast<std::uint32_t>(type));
}
/// Whether `type` is a block type ftopt reads (quantized: more than one value a block).
inline bool is_readable_blocks(Type type) {
  const auto kind = layout(static_cast<std::uint32_t>(type));
  return kind && kind->readable && kind->block_values > 1;
}
/// Whether quantize() writes `type`.
inline bool is_writable(Type type) {
  return type == Type::Q8_0 || type == Type::Q4_0 || type == Type::Q4_1 || type == Type::Q5_0 || type == Type::Q5_1;
}

namespace detail {
inline float half_at(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

/// Dequantizes `blocks` blocks at `in` into `out`, block by block, in parallel: `block` writes a
/// block's floats, straight into a float `out`, or for bf16 and fp16 into a block on the stack
/// that is rounded into `out` (as a float result's .to(dtype) rounds each value: the same bits,
/// in one pass over the output).
template <class Out, class Block>
void for_blocks(const std::uint8_t* in, Out* out, std::int64_t blocks, std::int64_t block_bytes,
                std::int64_t block_values, Block block) {
  at::parallel_for(0, blocks, 1024, [&](std::int64_t begin, std::int64_t end) {
    float values[256];  // the largest block (Q4_K, Q6_K)
    for (std::int64_t b = begin; b < end; ++b) {
      if constexpr (std::is_same_v<Out, float>) {
        block(in + b * block_bytes, out + b * block_values);
      } else {
        block(in + b * block_bytes, values);
        Out* o = out + b * block_values;
        for (std::int64_t j = 0; j < block_values; ++j) o[j] = static_cast<Out>(values[j]);
      }
    }
  });
}

/// A 5-bit block's 32 values q (0..31) from its 4 bytes of fifth bits `high` and 16 of nibbles
/// `low`, as w = d (q - offset) + m: Q5_0 with offset 16 and m 0, Q5_1 with offset 0
/// (dequantize_row_q5_0 and _q5_1).
inline void q5_values(const std::uint8_t* high, const std::uint8_t* low, float d, int offset, float m, float* w) {
  std::uint32_t fifth;
  std::memcpy(&fifth, high, 4);
  for (int j = 0; j < 16; ++j) {
    const int q0 = (low[j] & 0x0F) | static_cast<int>(((fifth >> j) & 1u) << 4);
    const int q1 = (low[j] >> 4) | static_cast<int>(((fifth >> (j + 16)) & 1u) << 4);
    w[j] = d * static_cast<float>(q0 - offset) + m;
    w[j + 16] = d * static_cast<float>(q1 - offset) + m;
  }
}

inline void put_half(std::uint8_t* p, float v) {
  const std::uint16_t bits = c10::Half(v).x;
  std::memcpy(p, &bits, 2);
}

/// 32 codes q (0..15) as 16 bytes: value j in byte j's low nibble, value j + 16 in its high one.
inline void put_nibbles(const int* q, std::uint8_t* out) {
  for (int j = 0; j < 16; ++j) out[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}
/// 32 codes q (0..31) as a 5-bit block's 4 bytes of fifth bits (bit j: value j's) and 16 of nibbles.
inline void put_q5(const int* q, std::uint8_t* high, std::uint8_t* low) {
  std::uint32_t fifth = 0;
  for (int j = 0; j < 32; ++j) fifth |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(high, &fifth, 4);
  put_nibbles(q, low);
}

/// One block of 32 values x as quantize_row_{q8_0,q4_0,q4_1,q5_0,q5_1}_ref writes it.
inline void quantize_block(Type type, const float* x, std::uint8_t* out) {
  int q[32];
  if (type == Type::Q8_0) {
    float amax = 0.0F;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0F, id = d != 0.0F ? 1.0F / d : 0.0F;
    put_half(out, d);
    for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::roundf(x[j] * id)));
  } else if (type == Type::Q4_0 || type == Type::Q5_0) {
    // d from the value of largest magnitude, its sign kept: that value becomes code 0.
    float amax = 0.0F, max = 0.0F;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    const bool five = type == Type::Q5_0;
    const float d = max / (five ? -16.0F : -8.0F), id = d != 0.0F ? 1.0F / d : 0.0F;
    for (int j = 0; j < 32; ++j)
      q[j] = std::min(five ? 31 : 15, static_cast<int>(static_cast<std::int8_t>(x[j] * id + (five ? 16.5F : 8.5F))));
    put_half(out, d);
    if (five) put_q5(q, out + 2, out + 6);
    else put_nibbles(q, out + 2);
  } else {  // Q4_1, Q5_1: d and the minimum
    float lo = std::numeric_limits<float>::max(), hi = -std::numeric_limits<float>::max();
    for (int j = 0; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
    const bool five = type == Type::Q5_1;
    const float d = (hi - lo) / (five ? 31.0F : 15.0F), id = d != 0.0F ? 1.0F / d : 0.0F;
    for (int j = 0; j < 32; ++j)  // Q4_1 clamps to 15 through int8; Q5_1 truncates to uint8
      q[j] = five ? static_cast<int>(static_cast<std::uint8_t>((x[j] - lo) * id + 0.5F))
                  : std::min(15, static_cast<int>(static_cast<std::int8_t>((x[j] - lo) * id + 0.5F)));
    put_half(out, d);
    put_half(out + 2, lo);
    if (five) put_q5(q, out + 4, out + 8);
    else put_nibbles(q, out + 4);
  }
}

/// Q4_K's 6-bit scale and min of sub-block j (0..7) from its 12 packed bytes (get_scale_min_k4).
inline void q4_k_scale_min(int j, const std::uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
} // namespace detail

namespace detail {
template <class Out>
void dequantize_blocks(const std::uint8_t* p, Type type, std::int64_t blocks, Out* o);
} // namespace detail

/// The float values of `bytes` (uint8, contiguous, on the CPU), a tensor of ggml type `type` and
/// torch shape `shape` (outermost first; the last dimension runs along the blocks), as `dtype`.
inline at::Tensor dequantize(const at::Tensor& bytes, Type type, at::IntArrayRef shape, at::ScalarType dtype) {
  const auto kind = layout(static_cast<std::uint32_t>(type));
  ftopt::detail::check(kind && kind->readable, "storage::ggml::dequantize: type ",
                       kind ? kind->name : std::to_string(static_cast<std::uint32_t>(type)),
                       " is not one ftopt reads (", readable_types, ")");
  std::int64_t numel = 1;
  for (const auto d : shape) numel *= d;
  ftopt::detail::check(numel % kind->block_values == 0 &&
                           static_cast<std::int64_t>(bytes.nbytes()) == numel / kind->block_values * kind->block_bytes,
                       "storage::ggml::dequantize: ", bytes.nbytes(), " bytes do not hold ", numel, " values of type ",
                       kind->name);
  const at::Tensor in = bytes.contiguous();
  const auto* p = in.data_ptr<std::uint8_t>();
  switch (type) {
  case Type::F32: return in.view(at::kFloat).view(shape).to(dtype, false, true);
  case Type::F16: return in.view(at::kHalf).view(shape).to(dtype, false, true);
  case Type::BF16: return in.view(at::kBFloat16).view(shape).to(dtype, false, true);
  default: break;
  }
  // The blocks written in `dtype` where it is a float type, else in float32 and converted.
  const bool direct = dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf;
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(direct ? dtype : at::kFloat));
  const std::int64_t blocks = numel / kind->block_values;
  if (dtype == at::kBFloat16) detail::dequantize_blocks(p, type, blocks, out.data_ptr<at::BFloat16>());
  else if (dtype == at::kHalf) detail::dequantize_blocks(p, type, blocks, out.data_ptr<at::Half>());
  else detail::dequantize_blocks(p, type, blocks, out.data_ptr<float>());
  return direct ? out : out.to(dtype);
}

namespace detail {
/// `blocks` blocks of ggml type `type` at `p` into `o`, in its element type (float, bf16, fp16).
template <class Out>
void dequantize_blocks(const std::uint8_t* p, Type type, std::int64_t blocks, Out* o) {
  if (type == Type::Q8_0) {
    for_blocks(p, o, blocks, 34, 32, [](const std::uint8_t* b, float* w) {
      const float d = half_at(b);
      for (int j = 0; j < 32; ++j) w[j] = d * static_cast<float>(static_cast<std::int8_t>(b[2 + j]));
    });
  } else if (type == Type::Q4_0) {
    for_blocks(p, o, blocks, 18, 32, [](const std::uint8_t* b, float* w) {
      const float d = half_at(b);
      for (int j = 0; j < 16; ++j) {
        w[j] = d * static_cast<float>((b[2 + j] & 0x0F) - 8);
        w[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
      }
    });
  } else if (type == Type::Q4_1) {
    for_blocks(p, o, blocks, 20, 32, [](const std::uint8_t* b, float* w) {
      const float d = half_at(b), m = half_at(b + 2);
      for (int j = 0; j < 16; ++j) {
        w[j] = d * static_cast<float>(b[4 + j] & 0x0F) + m;
        w[j + 16] = d * static_cast<float>(b[4 + j] >> 4) + m;
      }
    });
  } else if (type == Type::Q5_0) {
    for_blocks(p, o, blocks, 22, 32, [](const std::uint8_t* b, float* w) {
      q5_values(b + 2, b + 6, half_at(b), 16, 0.0f, w);
    });
  } else if (type == Type::Q5_1) {
    for_blocks(p, o, blocks, 24, 32, [](const std::uint8_t* b, float* w) {
      q5_values(b + 4, b + 8, half_at(b), 0, half_at(b + 2), w);
    });
  } else if (type == Type::Q4_K) {
    // Four groups of 64 values: 32 bytes of nibbles each, low nibbles for sub-block 2g, high for 2g + 1.
    for_blocks(p, o, blocks, 144, 256, [](const std::uint8_t* b, float* w) {
      const float d = half_at(b), dmin = half_at(b + 2);
      const std::uint8_t* scales = b + 4;
      const std::uint8_t* q = b + 16;
      for (int g = 0; g < 4; ++g, q += 32, w += 64) {
        int sc = 0, m = 0;
        q4_k_scale_min(2 * g, scales, sc, m);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
        q4_k_scale_min(2 * g + 1, scales, sc, m);
        const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
          w[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
          w[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
      }
    });
  } else {  // Q6_K: two halves of 128 values: 64 bytes of low nibbles, 32 of high pairs, 8 scales
    for_blocks(p, o, blocks, 210, 256, [](const std::uint8_t* b, float* w) {
      const float d = half_at(b + 208);
      const std::uint8_t* ql = b;
      const std::uint8_t* qh = b + 128;
      const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
      for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, w += 128) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          w[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
          w[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
          w[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
          w[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
        }
      }
    });
  }
}
} // namespace detail

/// `weight` (any float dtype, [..., in] with in a multiple of 32) in ggml blocks of `type` (one
/// of writable_types), as uint8 [rows, in / 32 * block bytes], rows being every dimension but the last.
inline at::Tensor quantize(const at::Tensor& weight, Type type) {
  ftopt::detail::check(is_writable(type), "storage::ggml::quantize: ftopt writes ", writable_types, ", not ",
                       name_of(type));
  const auto kind = *layout(static_cast<std::uint32_t>(type));
  ftopt::detail::check(weight.dim() >= 1 && weight.size(-1) % kind.block_values == 0, "storage::ggml::quantize: a ",
                       weight.sizes(), " tensor's rows are not whole ", kind.name, " blocks of ", kind.block_values,
                       " values");
  const at::Tensor w = weight.detach().to(at::kFloat).contiguous();
  const std::int64_t rows = weight.numel() / std::max<std::int64_t>(weight.size(-1), 1);
  const std::int64_t blocks = w.numel() / kind.block_values;
  at::Tensor out = at::empty({rows, weight.size(-1) / kind.block_values * kind.block_bytes}, at::TensorOptions().dtype(at::kByte));
  const float* x = w.data_ptr<float>();
  std::uint8_t* o = out.data_ptr<std::uint8_t>();
  at::parallel_for(0, blocks, 256, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) detail::quantize_block(type, x + b * kind.block_values, o + b * kind.block_bytes);
  });
  return out;
}

} // namespace ftopt::storage::ggml
