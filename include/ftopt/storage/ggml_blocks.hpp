#pragma once
/// storage::Ggml: a frozen weight in ggml's blocks of whichever type it came in, so that QLoRA
/// (peft::QLora<storage::Ggml>) trains over a GGUF file's tensors exactly as the file holds them
/// whatever their mix of types (a Q4_K_M file holds Q5_0, Q8_0, Q4_K and Q6_K weights side by
/// side). Each PackedWeight carries its own type (`block_type`), so one format holds them all;
/// the forward dequantizes each with storage::ggml::dequantize's kernel for that type. A float
/// weight given to quantize() (a layer the file did not supply) goes into the format's own
/// `type`, one that storage::ggml::quantize writes (Q8_0 unless chosen); a merged base
/// (quantize_like) into its blocks' own type where ftopt writes it, else into `type`.
/// `storage::format_of(type)` is the format for one block type.
///
///   auto [model, report, packed] = ftopt::models::load_llama_gguf_packed<ftopt::storage::Ggml>(path, targets);
///   ftopt::peft::QLora<ftopt::storage::Ggml> qlora(lora_options);
///   qlora.use_packed(std::move(packed));   // each base in its file's type

#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include <ftopt/error.hpp>
#include <ftopt/storage/ggml.hpp>
#include <ftopt/storage/packed.hpp>

namespace ftopt::storage {

struct Ggml {
  static constexpr const char* lora_name = "lora-ggml";  ///< peft::QLora's name over this format
  /// The type quantize() writes a float weight in (storage::ggml::writable_types).
  ggml::Type type = ggml::Type::Q8_0;

  void validate() const {
    ftopt::detail::check(ggml::is_writable(type), "storage::Ggml: type ", ggml::name_of(type),
                         " is not one ftopt quantizes into (", ggml::writable_types,
                         "); blocks of it can still be given as they are (QLora::use_packed)");
  }
  /// A 2-D weight whose rows are whole blocks of `type`.
  void check(const at::Tensor& weight, const std::string& module) const {
    const auto values = ggml::layout(static_cast<std::uint32_t>(type))->block_values;
    ftopt::detail::check(weight.dim() == 2 && weight.size(1) % values == 0, "storage::Ggml: the weight of '", module,
                         "' is ", weight.sizes(), "; ", ggml::name_of(type), " holds [out, in] weights with in a "
                         "multiple of ", values);
  }

  PackedWeight quantize(const at::Tensor& weight) const {
    validate();
    check(weight, "weight");
    return {.data = ggml::quantize(weight, type), .shape = weight.sizes().vec(),
            .block_size = ggml::layout(static_cast<std::uint32_t>(type))->block_values,
            .block_type = static_cast<std::uint32_t>(type)};
  }

  /// `weight` (a changed base: QLora::merge_quantized) in the type of the blocks it replaces
  /// where ftopt writes that type, else in `type`.
  PackedWeight quantize_like(const at::Tensor& weight, const PackedWeight& previous) const {
    const auto before = static_cast<ggml::Type>(previous.block_type);
    return (ggml::is_writable(before) ? Ggml{.type = before} : *this).quantize(weight);
  }

  static at::Tensor dequantize(const PackedWeight& packed, at::ScalarType dtype) {
    return ggml::dequantize(packed.data, static_cast<ggml::Type>(packed.block_type), packed.shape, dtype);
  }

  /// Whether blocks of `type` can be a base as they are: any block type ftopt reads.
  static bool keeps(ggml::Type type) { return ggml::is_readable_blocks(type); }

  /// A weight's blocks as a file holds them (uint8, [out, in / block_values * block_bytes] bytes
  /// in all; a view, not copied) as a PackedWeight of that type.
  static PackedWeight from_blocks(const at::Tensor& bytes, ggml::Type type, std::vector<std::int64_t> shape) {
    ftopt::detail::check(keeps(type), "storage::Ggml: ", ggml::name_of(type), " is not a block type ftopt reads (",
                         ggml::readable_types, ")");
    const auto kind = *ggml::layout(static_cast<std::uint32_t>(type));
    const bool fits = shape.size() == 2 && shape[1] % kind.block_values == 0 &&
                      static_cast<std::int64_t>(bytes.nbytes()) == shape[0] * shape[1] / kind.block_values * kind.block_bytes;
    ftopt::detail::check(fits, "storage::Ggml: ", bytes.nbytes(), " bytes are not the ", kind.name, " blocks of a [",
                         shape.size() == 2 ? std::to_string(shape[0]) + ", " + std::to_string(shape[1]) : std::string("?"),
                         "] weight");
    return {.data = bytes.view({shape[0], shape[1] / kind.block_values * kind.block_bytes}), .shape = std::move(shape),
            .block_size = kind.block_values, .block_type = static_cast<std::uint32_t>(type)};
  }
};

static_assert(Format<Ggml>);

/// A storage format that can take a file's blocks as they are: `keeps(type)` says which ggml
/// types, `from_blocks(bytes, type, shape)` makes the PackedWeight (storage::Q4_1, storage::Ggml).
template <class F>
concept BlockFormat = Format<F> && requires(const at::Tensor& bytes, ggml::Type type, std::vector<std::int64_t> shape) {
  { F::keeps(type) } -> std::same_as<bool>;
  { F::from_blocks(bytes, type, shape) } -> std::same_as<PackedWeight>;
};
static_assert(BlockFormat<Ggml>);

/// The storage format that holds blocks of `type` as they are (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
/// Q4_K, Q6_K): storage::Ggml, quantizing into `type` itself where ftopt writes it and into Q8_0
/// where it only reads it (the K-quants). A type that is not a block type ftopt reads is an error
/// naming it.
inline Ggml format_of(ggml::Type type) {
  ftopt::detail::check(Ggml::keeps(type), "storage::format_of: ", ggml::name_of(type),
                       " is not a block type ftopt reads (", ggml::readable_types, ")");
  return Ggml{.type = ggml::is_writable(type) ? type : ggml::Type::Q8_0};
}

} // namespace ftopt::storage
