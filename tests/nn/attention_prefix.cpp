// Tests for include/ftopt/nn/attention_prefix.hpp: an attention layer that takes a prefix holds
// the source it was given, and prepends the source's [P, C] rows to each sequence's [T, C] keys
// or values: out[b, :P] = rows, out[b, P:] = computed[b] (Li & Liang 2021), in the dtype of the
// computed keys.
#include <catch2/catch.hpp>

#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/nn/attention_prefix.hpp>

namespace {

/// Fixed key and value rows.
struct Rows : ftopt::nn::PrefixSource {
  at::Tensor key = torch::randn({2, 4}), value = torch::randn({2, 4});
  std::pair<at::Tensor, at::Tensor> key_value() override { return {key, value}; }
  std::vector<at::Tensor> parameters() const override { return {key, value}; }
};

/// An attention stand-in that exposes prepend.
struct Attention : ftopt::nn::PrefixAttention {
  std::int64_t prefix_width() const override { return 4; }
  using PrefixAttention::prepend;
};

} // namespace

TEST_CASE("PrefixAttention holds its source and prepends its rows to every sequence", "[nn][prefix]") {
  Attention attention;
  CHECK(attention.prefix() == nullptr);  // no prefix until one is set
  auto rows = std::make_shared<Rows>();
  attention.set_prefix(rows);
  REQUIRE(attention.prefix() == rows);
  auto [key_rows, value_rows] = attention.prefix()->key_value();
  CHECK(key_rows.is_same(rows->key));
  CHECK(attention.prefix()->parameters().size() == 2);

  const auto computed = torch::randn({3, 5, 4});  // [B, T, C]
  const auto out = Attention::prepend(key_rows, computed);
  REQUIRE(out.sizes() == torch::IntArrayRef({3, 2 + 5, 4}));
  for (std::int64_t b = 0; b < 3; ++b) {
    CHECK(torch::equal(out[b].narrow(0, 0, 2), key_rows));
    CHECK(torch::equal(out[b].narrow(0, 2, 5), computed[b]));
  }
  // Keys computed in bf16 (autocast) get the rows in bf16 too.
  const auto half = Attention::prepend(value_rows, computed.to(torch::kBFloat16));
  CHECK(half.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(half[1].narrow(0, 0, 2), value_rows.to(torch::kBFloat16)));
  // Gradients reach the rows through the prepend (their sum over the batch).
  auto trainable = key_rows.clone().requires_grad_();
  Attention::prepend(trainable, computed).sum().backward();
  CHECK(torch::equal(trainable.grad(), torch::full({2, 4}, 3.0)));
}
