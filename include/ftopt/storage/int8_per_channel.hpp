#pragma once
/// storage::Int8PerChannel: a frozen weight in int8, one scale per output row, symmetric, as
/// torchao's int8 weight-only config and PyTorch's per-channel symmetric observer compute it:
///     s_r = max(absmax_r / 127.5, float eps),  q = clamp(round(w / s_r), -128, 127)
/// 8 bits per value plus 32 per row (25.1% of float32 at 256 columns).

#include <limits>
#include <string>

#include <ATen/ATen.h>

#include <ftopt/error.hpp>
#include <ftopt/storage/packed.hpp>

namespace ftopt::storage {

struct Int8PerChannel {
  static constexpr const char* lora_name = "lora-int8";  ///< peft::QLora's name over this format

  void validate() const {}
  /// Any 2-D weight quantizes per row.
  void check(const at::Tensor& weight, const std::string& module) const {
    ftopt::detail::check(weight.dim() == 2, "storage::Int8PerChannel: the weight of '", module, "' has ",
                         weight.dim(), " dimensions; a frozen base is a Linear's [out, in] weight");
  }

  PackedWeight quantize(const at::Tensor& weight) const {
    const at::Tensor w = weight.detach().to(at::kFloat);
    const at::Tensor scale = (w.abs().amax(1) / 127.5).clamp_min(std::numeric_limits<float>::epsilon());
    return {.data = (w / scale.unsqueeze(1)).round().clamp(-128, 127).to(at::kChar),
            .scales = scale,
            .shape = w.sizes().vec()};
  }

  static at::Tensor dequantize(const PackedWeight& packed, at::ScalarType dtype) {
    return (packed.data.to(at::kFloat) * packed.scales.to(at::kFloat).unsqueeze(1)).to(dtype);
  }
};

static_assert(Format<Int8PerChannel>);

} // namespace ftopt::storage
