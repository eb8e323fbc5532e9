// Tests for include/ftopt/nn/shared_input_linears.hpp: one GEMM for several Linears on one
// input gives each layer's own forward, values and gradients, with and without LoRA branches,
// in fp32 and under bf16 autocast; anything it cannot fuse, and inputs of a few rows, run layer by
// layer.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/nn/shared_input_linears.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/quant/dynamic_int8.hpp>

#include "../support.hpp"

namespace {

struct Projections : torch::nn::Module {
  explicit Projections(bool bias = true)
      : query(register_module("query", ftopt::nn::Linear(torch::nn::LinearOptions(16, 16).bias(bias)))),
        key(register_module("key", ftopt::nn::Linear(torch::nn::LinearOptions(16, 16).bias(bias)))),
        value(register_module("value", ftopt::nn::Linear(torch::nn::LinearOptions(16, 8).bias(bias)))) {}
  std::array<ftopt::nn::LinearImpl*, 3> layers() { return {query.get(), key.get(), value.get()}; }
  ftopt::nn::Linear query, key, value;
};

/// The three outputs and every gradient (input first, then the parameters that train) after a
/// backward of sum(out_i * g_i), through `shared_input_linears` or layer by layer.
std::vector<torch::Tensor> run(Projections& m, const torch::Tensor& input, bool shared, bool autocast) {
  for (auto& p : m.parameters()) p.mutable_grad() = torch::Tensor();
  auto x = input.clone().requires_grad_(true);
  std::array<torch::Tensor, 3> out;
  {
    ftopt::compat::AutocastScope scope(torch::kCPU, torch::kBFloat16, autocast);
    if (shared) out = ftopt::nn::shared_input_linears<3>(m.layers(), x);
    else
      for (std::size_t i = 0; i < 3; ++i) out[i] = m.layers()[i]->forward(x);
  }
  return ftopt::test::outputs_and_gradients({out.begin(), out.end()}, x, m);
}

/// Elementwise within tol (fp32: the same sums in another order).
void check_same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i, (a[i].to(torch::kFloat) - b[i].to(torch::kFloat)).abs().max().item<double>());
    CHECK(torch::allclose(a[i].to(torch::kFloat), b[i].to(torch::kFloat), tol, tol));
  }
}

/// Within a relative L2 error (bf16: each element rounds to 8 bits, and LibTorch 1.13's bf16
/// GEMMs of other shapes may round partial sums differently, so single elements can differ by a
/// few units in the last place).
void check_close_bf16(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double rel) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].to(torch::kFloat), y = b[i].to(torch::kFloat);
    const double error = ((x - y).norm() / y.norm().clamp_min(1e-12)).item<double>();
    CAPTURE(i, error);
    CHECK(error <= rel);
  }
}

/// Whether an output is a column slice of one stacked product (the fused path) rather than its
/// own tensor.
bool is_slice_of_stack(const torch::Tensor& t) { return t.stride(-2) == 16 + 16 + 8; }

} // namespace

TEST_CASE("shared_input_linears is each Linear's own forward, values and gradients", "[nn][shared_input_linears]") {
  torch::manual_seed(1);
  Projections m;
  const auto x = torch::randn({2, 8, 16});  // min_fused_rows rows
  auto shared = run(m, x, true, false);
  CHECK(is_slice_of_stack(shared[0]));
  CHECK(is_slice_of_stack(shared[2]));
  check_same(shared, run(m, x, false, false), 1e-6);

  SECTION("under bf16 autocast: one cast of the input, outputs in bf16 as autocast's") {
    auto mixed = run(m, x, true, true);
    CHECK(mixed[0].scalar_type() == torch::kBFloat16);
    CHECK(is_slice_of_stack(mixed[1]));
    check_close_bf16(mixed, run(m, x, false, true), 1e-2);
  }
}

TEST_CASE("shared_input_linears adds unmerged LoRA branches and gives their gradients", "[nn][shared_input_linears]") {
  // The additive path: with the merged-weight kernel on, these branches take it
  // (peft/kernel/adapted.cpp); off, the stacked bases' GEMM plus each branch.
  torch::manual_seed(2);
  Projections m;
  ftopt::peft::Lora lora({.r = 4, .alpha = 8, .targets = {"query", "value"}, .kernel = {.merged_weight = false}});
  lora.attach(m);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, branch] : lora.branches()) branch->b()->weight.normal_();  // B = 0 would hide the branch
  }
  const auto x = torch::randn({ftopt::nn::min_fused_rows, 16});
  auto shared = run(m, x, true, false);
  CHECK(shared.size() == 3 + 1 + 4);  // outputs, x, and A and B of two branches
  CHECK_FALSE(is_slice_of_stack(shared[0]));  // query: the slice plus its branch
  CHECK(is_slice_of_stack(shared[1]));        // key has none
  check_same(shared, run(m, x, false, false), 1e-5);
  check_close_bf16(run(m, x, true, true), run(m, x, false, true), 1e-2);

  SECTION("merged branches fuse as plain layers") {
    lora.merge(m);
    auto merged = run(m, x, true, false);
    CHECK(is_slice_of_stack(merged[0]));
    check_same(merged, run(m, x, false, false), 1e-5);
  }
}

TEST_CASE("shared_input_linears runs a few rows (a decoding step) layer by layer, with the same values",
          "[nn][shared_input_linears]") {
  torch::manual_seed(3);
  Projections m;
  for (const std::int64_t rows : {std::int64_t{1}, ftopt::nn::min_fused_rows - 1}) {
    const auto x = torch::randn({1, rows, 16});
    auto shared = run(m, x, true, false);
    CHECK_FALSE(is_slice_of_stack(shared[0]));
    check_same(shared, run(m, x, false, false), 0);
  }
  CHECK(is_slice_of_stack(run(m, torch::randn({1, ftopt::nn::min_fused_rows, 16}), true, false)[0]));
}

TEST_CASE("shared_input_linears runs layer by layer what it cannot fuse", "[nn][shared_input_linears]") {
  torch::manual_seed(4);
  const auto x = torch::randn({4, 16});
  SECTION("a layer with another extension (dynamic int8)") {
    auto owner = std::make_shared<Projections>();  // convert walks the module tree from its root
    auto& m = *owner;
    torch::NoGradGuard no_grad;
    ftopt::quant::DynamicInt8{}.convert(m);
    auto out = ftopt::nn::shared_input_linears<3>(m.layers(), x);
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK_FALSE(is_slice_of_stack(out[i]));
      CHECK(torch::equal(out[i], m.layers()[i]->forward(x)));
    }
  }
  SECTION("an extension whose forward must run though it changes nothing (an observer)") {
    struct Counting : ftopt::nn::Extension<ftopt::nn::LinearImpl> {
      at::Tensor forward(ftopt::nn::LinearImpl& layer, const at::Tensor& input) override {
        ++calls;
        return layer.base_forward(input);
      }
      ftopt::nn::Effect effect() const override { return ftopt::nn::Effect::observes; }
      int calls = 0;
    };
    Projections m;
    auto counting = std::make_shared<Counting>();
    m.key->attach(counting);
    auto out = ftopt::nn::shared_input_linears<3>(m.layers(), x);
    CHECK(counting->calls == 1);
    CHECK_FALSE(is_slice_of_stack(out[0]));
  }
  SECTION("biases on some layers only") {
    Projections m;
    m.key = m.replace_module("key", ftopt::nn::Linear(torch::nn::LinearOptions(16, 16).bias(false)));
    auto out = ftopt::nn::shared_input_linears<3>(m.layers(), x);
    CHECK_FALSE(is_slice_of_stack(out[0]));
    for (std::size_t i = 0; i < 3; ++i) CHECK(torch::equal(out[i], m.layers()[i]->forward(x)));
  }
}
