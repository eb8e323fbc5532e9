#pragma once
/// storage::Q4_1: a frozen weight in ggml's Q4_1 blocks, the format GGUF files ship LLMs in: each
/// row in blocks of 32 values, a block 20 bytes (fp16 scale d, fp16 minimum m, 32 4-bit codes),
/// w = d q + m. quantize() is llama.cpp's quantize_row_q4_1_ref (ggml-quants.c):
///     d = (max - min) / 15,  q = min(15, (int)((w - min) / d + 0.5)),  d and m stored as fp16
/// and the packed data are the blocks as a GGUF file holds them (uint8 [out, in / 32 * 20]), so
/// a file's Q4_1 tensor is a PackedWeight as it is (quantizing its dequantized values gives its
/// bytes back). 5 bits a weight: 15.6% of float32.
///
///   storage::Q4_1 q4;
///   storage::PackedWeight packed = q4.quantize(weight);            // [out, in], in % 32 == 0
///   at::Tensor w = storage::Q4_1::dequantize(packed, at::kBFloat16);

#include <cstdint>
#include <string>

#include <ATen/ATen.h>

#include <ftopt/error.hpp>
#include <ftopt/storage/ggml.hpp>
#include <ftopt/storage/packed.hpp>

namespace ftopt::storage {

struct Q4_1 {
  static constexpr const char* lora_name = "lora-q4_1";  ///< peft::QLora's name over this format
  static constexpr std::int64_t block_values = 32, block_bytes = 20;

  void validate() const {}
  /// A 2-D weight whose rows are whole blocks.
  void check(const at::Tensor& weight, const std::string& module) const {
    ftopt::detail::check(weight.dim() == 2 && weight.size(1) % block_values == 0, "storage::Q4_1: the weight of '",
                         module, "' is ", weight.sizes(), "; Q4_1 holds [out, in] weights with in a multiple of 32");
  }

  PackedWeight quantize(const at::Tensor& weight) const {
    check(weight, "weight");
    return {.data = ggml::quantize(weight, ggml::Type::Q4_1), .shape = weight.sizes().vec(), .block_size = block_values,
            .block_type = static_cast<std::uint32_t>(ggml::Type::Q4_1)};
  }

  static at::Tensor dequantize(const PackedWeight& packed, at::ScalarType dtype) {
    return ggml::dequantize(packed.data, ggml::Type::Q4_1, packed.shape, dtype);
  }

  /// Whether blocks of `type` can be a base as they are: Q4_1's only (storage::Ggml keeps any).
  static bool keeps(ggml::Type type) { return type == ggml::Type::Q4_1; }
  static PackedWeight from_blocks(const at::Tensor& bytes, ggml::Type type, std::vector<std::int64_t> shape) {
    ftopt::detail::check(keeps(type), "storage::Q4_1: ", ggml::name_of(type), " blocks are not Q4_1's; "
                         "storage::Ggml holds every block type ftopt reads");
    return from_blocks(bytes, std::move(shape));
  }

  /// A GGUF file's Q4_1 tensor ([out, in / 32 * 20] bytes, a view: not copied) as a PackedWeight.
  static PackedWeight from_blocks(const at::Tensor& bytes, std::vector<std::int64_t> shape) {
    ftopt::detail::check(shape.size() == 2 && shape[1] % block_values == 0 &&
                             static_cast<std::int64_t>(bytes.nbytes()) == shape[0] * shape[1] / block_values * block_bytes,
                         "storage::Q4_1: ", bytes.nbytes(), " bytes are not the Q4_1 blocks of a [", shape.size() == 2
                             ? std::to_string(shape[0]) + ", " + std::to_string(shape[1]) : std::string("?"), "] weight");
    return {.data = bytes.view({shape[0], shape[1] / block_values * block_bytes}), .shape = std::move(shape),
            .block_size = block_values, .block_type = static_cast<std::uint32_t>(ggml::Type::Q4_1)};
  }
};

static_assert(Format<Q4_1>);

} // namespace ftopt::storage
