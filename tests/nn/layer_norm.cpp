// Tests for include/ftopt/nn/layer_norm.hpp: torch::nn::LayerNorm's options, names and values
// ((x - mean) / sqrt(var + eps) * weight + bias over the last dims, var biased), computed in the
// weight's dtype: a bf16 input to fp32 weights (as a bf16 autocast Linear hands it on) is
// normalized in fp32, as PyTorch's autocast runs layer_norm in fp32. And nn::add_layer_norm's
// kernel (the residual sum and the LayerNorm after it) against the formula in double precision
// on every compiled copy.
#include <catch2/catch.hpp>

#include <sstream>

#include <torch/torch.h>

#include <ftopt/nn/add_layer_norm.hpp>
#include <ftopt/nn/layer_norm.hpp>
#include <ftopt/weights/state_dict.hpp>

#include "../isa.hpp"
#include "../support.hpp"

using namespace ftopt;

namespace {

/// The formula, over the last dimension.
torch::Tensor layer_norm_formula(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                 double eps) {
  const auto mean = x.mean(-1, /*keepdim=*/true);
  const auto var = (x - mean).square().mean(-1, /*keepdim=*/true);
  return (x - mean) / torch::sqrt(var + eps) * weight + bias;
}

} // namespace

TEST_CASE("nn::LayerNorm is torch::nn::LayerNorm, normalizing in its weight's dtype", "[nn]") {
  const auto options = torch::nn::LayerNormOptions({8}).eps(1e-12);
  nn::LayerNorm ours(options);
  torch::nn::LayerNorm theirs(options);
  CHECK(test::state_dict_names(*ours) == test::state_dict_names(*theirs));  // "weight", "bias"
  CHECK(torch::equal(ours->weight, torch::ones({8})));
  CHECK(torch::equal(ours->bias, torch::zeros({8})));
  torch::manual_seed(19);
  {
    torch::NoGradGuard no_grad;
    ours->weight.uniform_(0.5, 1.5);
    ours->bias.uniform_(-0.5, 0.5);
  }
  weights::load_state_dict(*theirs, weights::state_dict(*ours));
  const auto x = torch::randn({3, 5, 8}) * 4 + 1;
  CHECK(torch::allclose(ours(x), theirs(x), 1e-5, 1e-6));
  CHECK(torch::allclose(ours(x), layer_norm_formula(x, ours->weight, ours->bias, 1e-12), 1e-5, 1e-5));

  SECTION("a bf16 input to fp32 weights: normalized in fp32, an fp32 output") {
    const auto half = x.to(torch::kBFloat16);
    const auto out = ours(half);
    CHECK(out.scalar_type() == torch::kFloat);
    CHECK(torch::allclose(out, theirs(half.to(torch::kFloat)), 1e-5, 1e-6));
  }
  SECTION("bf16 weights (Bf16True): a bf16 computation") {
    ours->to(torch::kBFloat16);
    const auto out = ours(x.to(torch::kBFloat16));
    CHECK(out.scalar_type() == torch::kBFloat16);
    CHECK(torch::allclose(out.to(torch::kFloat), theirs(x), 0.05, 0.05));
  }
  SECTION("no elementwise affine: no parameters, the plain normalization") {
    nn::LayerNorm plain(torch::nn::LayerNormOptions({8}).elementwise_affine(false));
    CHECK(plain->parameters().empty());
    CHECK(torch::allclose(plain(x), layer_norm_formula(x, torch::ones({8}), torch::zeros({8}), 1e-5), 1e-5, 1e-5));
  }
  SECTION("printed with its shape and eps") {
    std::ostringstream printed;
    ours->pretty_print(printed);
    CHECK(printed.str() == "ftopt::nn::LayerNorm([8], eps=1e-12)");
  }
}

namespace {

/// The kernel on copy `isa` against the formula through autograd in double precision: a float32
/// and a bf16 branch, a float32 and a bf16 output, gradients through both outputs (the sum also
/// used directly, as the next residual uses it) and the parameters', on one and two threads
/// (the same on both); a frozen LayerNorm; and the ops (fused = false).
void check_add_layer_norm_kernel(CpuIsa isa) {
  const double eps = 1e-12;
  for (const auto& [rows, n] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 16}, {67, 37}, {70, 256}}) {
    for (const auto branch_type : {torch::kFloat, torch::kBFloat16}) {
      for (const auto out : {torch::kFloat, torch::kBFloat16}) {
        INFO(rows << " rows of " << n << ", branch " << branch_type << ", output " << out);
        const auto branch0 = (torch::randn({rows, n}) * 2).to(branch_type), stream0 = torch::randn({rows, n}) + 0.5;
        const auto w0 = torch::rand({n}) + 0.5, b0 = torch::randn({n});
        const auto g_sum = torch::randn({rows, n}), g_out = torch::randn({rows, n}).to(out);
        auto branch_ref = branch0.to(torch::kDouble).requires_grad_(true);
        auto stream_ref = stream0.to(torch::kDouble).requires_grad_(true);
        auto w_ref = w0.to(torch::kDouble).requires_grad_(true), b_ref = b0.to(torch::kDouble).requires_grad_(true);
        const auto sum_ref = branch_ref + stream_ref;
        const auto normed_ref = layer_norm_formula(sum_ref, w_ref, b_ref, eps);
        torch::autograd::backward({sum_ref, normed_ref}, {g_sum.to(torch::kDouble), g_out.to(torch::kDouble)});
        REQUIRE(nn::add_layer_norm_fuses(branch0, stream0, w0, b0, out));
        // bf16 rounds the output (and the gradient that reaches the branch) once.
        const double tol = out == torch::kBFloat16 || branch_type == torch::kBFloat16 ? 2e-2 : 1e-4;
        std::vector<torch::Tensor> runs;
        for (const int threads : {1, 2}) {
          const test::ThreadsGuard guard(threads);
          auto branch = branch0.clone().requires_grad_(true), stream = stream0.clone().requires_grad_(true);
          auto w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
          const auto [sum, normed] = nn::add_layer_norm(branch, stream, w, b, eps, out, true, isa);
          CHECK(sum.scalar_type() == torch::kFloat);
          CHECK(normed.scalar_type() == out);
          torch::autograd::backward({sum, normed}, {g_sum, g_out});
          CHECK(torch::allclose(sum.to(torch::kDouble), sum_ref, 1e-6, 1e-6));
          CHECK(torch::allclose(normed.to(torch::kDouble), normed_ref, tol, tol));
          CHECK(branch.grad().scalar_type() == branch_type);
          CHECK(torch::allclose(branch.grad().to(torch::kDouble), branch_ref.grad(), tol, tol));
          CHECK(torch::allclose(stream.grad().to(torch::kDouble), stream_ref.grad(), 1e-4, 1e-4));
          const double param_tol = out == torch::kBFloat16 ? 2e-2 * std::sqrt(static_cast<double>(rows)) : 1e-4;
          CHECK(torch::allclose(w.grad().to(torch::kDouble), w_ref.grad(), 1e-3, param_tol));
          CHECK(torch::allclose(b.grad().to(torch::kDouble), b_ref.grad(), 1e-3, param_tol));
          runs.push_back(torch::cat({sum.flatten(), normed.to(torch::kFloat).flatten(), stream.grad().flatten(),
                                     w.grad(), b.grad()}));
        }
        CHECK(torch::equal(runs[0], runs[1]));
        // A frozen LayerNorm, and only the normalized output used: the inputs' gradients alone.
        auto stream = stream0.clone().requires_grad_(true);
        nn::add_layer_norm(branch0, stream, w0, b0, eps, out, true, isa).second.backward(g_out);
        const auto through_norm =
            torch::autograd::grad({layer_norm_formula(stream_ref + branch0.to(torch::kDouble), w0.to(torch::kDouble),
                                                      b0.to(torch::kDouble), eps)},
                                  {stream_ref}, {g_out.to(torch::kDouble)})[0];
        CHECK(torch::allclose(stream.grad().to(torch::kDouble), through_norm, 1e-4, 1e-4));
        // The ops (fused = false): the same values.
        const auto [sum_ops, normed_ops] = nn::add_layer_norm(branch0, stream0, w0, b0, eps, out, false);
        const auto [sum_fused, normed_fused] = nn::add_layer_norm(branch0, stream0, w0, b0, eps, out, true, isa);
        CHECK(torch::equal(sum_ops, sum_fused));
        CHECK(torch::allclose(normed_ops.to(torch::kFloat), normed_fused.to(torch::kFloat), tol, tol));
      }
    }
  }
}

} // namespace

FTOPT_TEST_EACH_ISA("add_layer_norm: the residual sum and its LayerNorm, values and gradients, on any thread count",
                    "[nn]", check_add_layer_norm_kernel)

TEST_CASE("add_layer_norm: what the kernel does not take runs as the ops", "[nn]") {
  const auto x = torch::randn({4, 8}), w = torch::ones({8}), b = torch::zeros({8});
  CHECK_FALSE(nn::add_layer_norm_fuses(x.to(torch::kDouble), x, w, b, torch::kFloat));
  CHECK_FALSE(nn::add_layer_norm_fuses(x, x.to(torch::kBFloat16), w, b, torch::kFloat));  // a bf16 stream
  CHECK_FALSE(nn::add_layer_norm_fuses(x, x, w.to(torch::kBFloat16), b, torch::kFloat));  // Bf16True's weights
  CHECK_FALSE(nn::add_layer_norm_fuses(x, x, w, b, torch::kHalf));
  CHECK_FALSE(nn::add_layer_norm_fuses(x.narrow(1, 0, 4), x, w, b, torch::kFloat));
  const auto [sum, normed] = nn::add_layer_norm(x.to(torch::kDouble), x.to(torch::kDouble), w.to(torch::kDouble),
                                                b.to(torch::kDouble), 1e-5, torch::kDouble);
  CHECK(torch::allclose(normed, layer_norm_formula(2 * x.to(torch::kDouble), w, b, 1e-5), 1e-6, 1e-6));
  CHECK(torch::equal(sum, 2 * x.to(torch::kDouble)));
}
