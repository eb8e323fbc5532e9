// Tests for include/ftopt/storage/int8_per_channel.hpp: the int8 per-row format against its
// definition, scale = max(absmax / 127.5, eps) and q = clamp(round(w / scale), -128, 127).
#include <catch2/catch.hpp>

#include <limits>

#include <torch/torch.h>

#include <ftopt/storage/int8_per_channel.hpp>

#include "../support.hpp"
#include "formats_by_definition.hpp"

using namespace ftopt;
using ftopt::test::values_of;

TEST_CASE("Int8 per channel: scale max(absmax / 127.5, eps) per row, q = clamp(round(w / scale))", "[storage][int8]") {
  torch::manual_seed(4);
  auto weight = torch::randn({24, 40});
  weight[5].zero_();  // a zero row takes the smallest scale
  const auto packed = storage::Int8PerChannel{}.quantize(weight);
  REQUIRE(packed.data.scalar_type() == at::kChar);
  REQUIRE(packed.scales.numel() == 24);
  const auto q = values_of(packed.data), s = values_of(packed.scales);
  const auto [codes, scales] = ftopt::test::int8_per_row_by_definition(values_of(weight), 24, 40);
  std::size_t wrong = 0;
  for (int r = 0; r < 24; ++r) wrong += s[r] != scales[r];
  for (std::size_t i = 0; i < q.size(); ++i) wrong += q[i] != codes[i];
  CHECK(wrong == 0);
  const auto back = storage::Int8PerChannel::dequantize(packed, at::kFloat);
  CHECK(torch::allclose(back, packed.data.to(at::kFloat) * packed.scales.unsqueeze(1)));
  // Every value within half a step of its row's scale (and float32's rounding of w / scale).
  CHECK(((back - weight).abs() <= packed.scales.unsqueeze(1) * (0.5 + 1e-5)).all().item<bool>());
}
