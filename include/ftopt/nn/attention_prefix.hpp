#pragma once
/// The attach point prefix tuning needs in an attention layer: a source of extra key and value
/// rows, prepended to the keys and values the layer computes from its input (Li & Liang 2021).
/// Attention modules that accept prefixes derive from nn::PrefixAttention; models whose
/// attention does declare `static constexpr bool has_prefix_attention = true;` in their module
/// class, which peft::Prefix checks at compile time.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace ftopt::nn {

/// Gives the prefix keys and values of one attention layer, each [prefix length, hidden].
struct PrefixSource {
  virtual ~PrefixSource() = default;
  virtual std::pair<at::Tensor, at::Tensor> key_value() = 0;
  /// The trainable tensors key_value() computes from (a checkpointed block needs them).
  virtual std::vector<at::Tensor> parameters() const = 0;
};

/// An attention module that can take a prefix.
class PrefixAttention {
public:
  virtual ~PrefixAttention() = default;
  void set_prefix(std::shared_ptr<PrefixSource> source) { prefix_ = std::move(source); }
  /// The width of a key or value row (the hidden size).
  virtual std::int64_t prefix_width() const = 0;
  const std::shared_ptr<PrefixSource>& prefix() const { return prefix_; }

protected:
  /// keys or values [B, T, C] with the prefix rows [P, C] prepended: [B, P + T, C].
  static at::Tensor prepend(const at::Tensor& rows, const at::Tensor& computed) {
    return at::cat({rows.to(computed.scalar_type()).unsqueeze(0).expand({computed.size(0), -1, -1}), computed}, 1);
  }

  std::shared_ptr<PrefixSource> prefix_;
};

} // namespace ftopt::nn
