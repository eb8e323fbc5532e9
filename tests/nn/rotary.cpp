// Tests for include/ftopt/nn/rotary.hpp: transformers' apply_rotary_pos_emb written out here,
// x * cos + cat(-x2, x1) * sin, against the kernel: bit for bit in bf16 (values and gradients),
// to float32 rounding in float32, for cos and sin of one sequence or of each row (packed rows),
// and for x a transposed view, as a Llama's q and k are.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/nn/rotary.hpp>

#include "../isa.hpp"
#include "../support.hpp"

using namespace ftopt;

namespace {

/// transformers' form, cos and sin cast to x's dtype first.
torch::Tensor rotary_written_out(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto half = x.size(-1) / 2;
  const auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.to(x.scalar_type()) + rotated * sin.to(x.scalar_type());
}

/// The kernel's copy `isa` against the written-out form, for head widths below and past a
/// vector's 16 lanes (with a tail).
void check_rotary_kernel(CpuIsa isa) {
  for (const std::int64_t D : {12, 76}) {
    const std::int64_t B = 3, H = 5, T = 7;
    const auto angles = torch::rand({B, T, D / 2}) * 50;
    for (const bool per_row : {false, true}) {
      const auto full = torch::cat({angles, angles}, -1);
      const auto cos = per_row ? full.cos().unsqueeze(1) : full[0].cos();
      const auto sin = per_row ? full.sin().unsqueeze(1) : full[0].sin();
      for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
        INFO("head width " << D << ", " << (per_row ? "per-row angles, " : "one sequence's angles, ")
                           << (dtype == torch::kFloat ? "float32" : "bf16"));
        // As a Llama's q: [B, T, H, D] seen as [B, H, T, D].
        const auto x0 = (torch::randn({B, T, H, D}) * 4).to(dtype);
        const auto g = torch::randn({B, H, T, D}).to(dtype);
        auto x_ref = x0.clone().requires_grad_(true), x = x0.clone().requires_grad_(true);
        const auto expected = rotary_written_out(x_ref.transpose(1, 2), cos, sin);
        expected.backward(g);
        REQUIRE(nn::rotary_fuses(x.transpose(1, 2), cos, sin));
        const auto got = nn::apply_rotary(x.transpose(1, 2), cos, sin, true, isa);
        got.backward(g);
        if (dtype == torch::kBFloat16) {
          CHECK(torch::equal(got, expected));
          CHECK(torch::equal(x.grad(), x_ref.grad()));
        } else {
          CHECK(torch::allclose(got, expected, 1e-6, 1e-5));
          CHECK(torch::allclose(x.grad(), x_ref.grad(), 1e-6, 1e-5));
        }
        // fused = false runs the ops.
        CHECK(torch::allclose(nn::apply_rotary(x0.transpose(1, 2), cos, sin, false).to(torch::kFloat),
                              expected.to(torch::kFloat), 1e-6, 1e-5));
      }
    }
  }
}

} // namespace

FTOPT_TEST_EACH_ISA("apply_rotary: the kernel gives x * cos + rotate_half(x) * sin and its gradient", "[nn]",
                    check_rotary_kernel)

TEST_CASE("apply_rotary: what the kernel does not take goes to the ops", "[nn]") {
  // double, a 3-dim x, angles that learn.
  const auto x = torch::randn({2, 3, 4, 6}, torch::kDouble);
  const auto c = torch::randn({4, 6}), s = torch::randn({4, 6});
  CHECK_FALSE(nn::rotary_fuses(x, c, s));
  CHECK_FALSE(nn::rotary_fuses(x.to(torch::kFloat)[0], c, s));
  CHECK_FALSE(nn::rotary_fuses(x.to(torch::kFloat), c.clone().requires_grad_(true), s));
  CHECK(torch::allclose(nn::apply_rotary(x, c, s), rotary_written_out(x, c, s)));
}
