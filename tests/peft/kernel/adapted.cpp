// Tests for include/ftopt/peft/kernel/adapted.hpp and the adapter kernel under it
// (kernel/adapter_linears.hpp): LoRA layers on frozen weights computed as one GEMM over W + s B A give the outputs and gradients of the formula PEFT's LoRA layer computes,
// y = x W^T + b + s (x A^T) B^T, and DoRA's, y = (m / n) (x W^T + s (x A^T) B^T) + b with
// n = ||W + s B A||_row detached (peft/tuners/lora/dora.py), written here with plain ATen ops
// and differentiated by autograd;
// alone (peft::LoraBranch's forward) and grouped (nn::shared_input_linears), fp32 and bf16
// autocast, with and without gradient mode; and the cases it must leave to the layer-by-layer path.
#include <catch2/catch.hpp>

#include <string>
#include <variant>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/nn/shared_input_linears.hpp>
#include <ftopt/peft/kernel/adapted.hpp>
#include <ftopt/peft/lora.hpp>

#include "../../support.hpp"

namespace {

struct LowRankProjections : torch::nn::Module {
  LowRankProjections()
      : query(register_module("query", ftopt::nn::Linear(16, 12))),
        key(register_module("key", ftopt::nn::Linear(16, 12))),
        value(register_module("value", ftopt::nn::Linear(16, 8))) {}
  std::array<ftopt::nn::LinearImpl*, 3> layers() { return {query.get(), key.get(), value.get()}; }
  ftopt::nn::Linear query, key, value;
};

/// LoRA (r 4, alpha 2 r: scaling 2) on query and value, B drawn at random (PEFT's zero B would
/// hide the branch), biases trained too (`bias = "all"`), so every gradient the kernel gives is
/// checked. With `dora`, DoRA's magnitudes drawn away from the row norms they start at.
/// `kernel`: ftopt's kernels or PEFT's form.
ftopt::peft::Lora with_branches(LowRankProjections& m, bool dora = false, std::int64_t r = 4,
                                ftopt::KernelOptions kernel = {}) {
  ftopt::peft::Lora lora({.r = r, .alpha = 2.0 * static_cast<double>(r), .targets = {"query", "value"},
                          .bias = ftopt::peft::LoraBias::All, .dora = dora, .kernel = kernel});
  lora.attach(m);
  torch::NoGradGuard no_grad;
  for (auto& [name, branch] : lora.branches()) {
    branch->b()->weight.normal_();
    if (dora) branch->magnitude().uniform_(0.5, 2);
  }
  return lora;
}

/// Whether `t` came out of the kernel: its gradient function, or the one its split came from.
bool from_low_rank_kernel(const torch::Tensor& t) {
  auto fn = t.grad_fn();
  for (int hop = 0; fn && hop < 2; ++hop) {
    if (fn->name().find("AdapterLinearsFunction") != std::string::npos) return true;
    fn = fn->next_edges().empty() ? nullptr : fn->next_edges()[0].function;
  }
  return false;
}

/// Whether the branch offers the kernel a low-rank term on `layer` (no dropout in training).
bool has_low_rank_term(const ftopt::peft::LoraBranch& branch, const ftopt::nn::LinearImpl& layer) {
  const auto part = branch.part(layer);
  return part && std::holds_alternative<ftopt::peft::kernel::LowRank>(part->term);
}

/// Whether the three layers can run as one kernel call with low-rank terms: every layer a part
/// (peft::kernel::part_of), one with a term.
bool grouped_in_kernel(LowRankProjections& m) {
  bool term = false;
  for (auto* layer : m.layers()) {
    const auto part = ftopt::peft::kernel::part_of(*layer);
    if (!part) return false;
    term = term || std::holds_alternative<ftopt::peft::kernel::LowRank>(part->term);
  }
  return term;
}

/// The three outputs, then the gradients of x and of every trained parameter after a backward of
/// sum(out_i * g_i): through the layers (`formula` false) or through the formula.
std::vector<torch::Tensor> run_low_rank(LowRankProjections& m, const ftopt::peft::Lora& lora, const torch::Tensor& input, bool formula,
                               bool autocast, bool grouped = true, bool* kernel = nullptr) {
  for (auto& p : m.parameters()) p.mutable_grad() = torch::Tensor();
  auto x = input.clone().requires_grad_(true);
  std::array<torch::Tensor, 3> out;
  {
    ftopt::compat::AutocastScope scope(torch::kCPU, torch::kBFloat16, autocast);
    if (formula) {
      auto layers = m.layers();
      for (std::size_t i = 0; i < 3; ++i) out[i] = at::linear(x, layers[i]->weight, layers[i]->bias);
      const std::array<std::size_t, 2> adapted_layers{0, 2};  // query, value
      for (std::size_t j = 0; j < 2; ++j) {
        auto& branch = lora.branches()[j].second;
        auto* layer = layers[adapted_layers[j]];
        const auto term = 2.0 * at::linear(at::linear(x, branch->a()->weight), branch->b()->weight);
        auto& y = out[adapted_layers[j]];
        if (!branch->magnitude().defined()) {
          y = y + term;
        } else {  // DoRA: the bias stays out of the rescaled part; the result in the layer's dtype
          const auto n = (layer->weight + 2.0 * at::mm(branch->b()->weight, branch->a()->weight)).norm(2, {1}).detach();
          const auto own = at::linear(x, layer->weight);
          y = ((branch->magnitude() / n) * (own + term) + layer->bias).to(own.scalar_type());
        }
      }
    } else if (grouped) {
      out = ftopt::nn::shared_input_linears<3>(m.layers(), x);
    } else {
      for (std::size_t i = 0; i < 3; ++i) out[i] = m.layers()[i]->forward(x);
    }
  }
  if (kernel) *kernel = from_low_rank_kernel(out[0]) && from_low_rank_kernel(out[2]);
  return ftopt::test::outputs_and_gradients({out.begin(), out.end()}, x, m);
}

/// Each tensor within a relative L2 error of the formula's.
void check_near_formula(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].defined());
    CHECK(got[i].scalar_type() == want[i].scalar_type());
    const auto x = got[i].to(torch::kFloat), y = want[i].to(torch::kFloat);
    const double error = ((x - y).norm() / y.norm().clamp_min(1e-12)).item<double>();
    CAPTURE(i, error);
    CHECK(error <= rel);
  }
}

} // namespace

TEST_CASE("The adapter kernel gives PEFT's LoRA and DoRA formulas, values and gradients", "[peft][kernel][dora]") {
  const bool dora = GENERATE(false, true);
  // r 1: A's and B's gradients through u = x A^T; r 4, wide for 16-in layers of 12 and 8 outputs
  // (16 x 12 < 2 x 4 x 28 multiply-adds per token): through G = g^T x, as DoRA's always are.
  const std::int64_t r = GENERATE(1, 4);
  CAPTURE(dora, r);
  CHECK(ftopt::peft::kernel::detail::grads_from_full_product(r, 16, 12) == (r == 4));
  CHECK(ftopt::peft::kernel::detail::grads_from_full_product(r, 16, 8) == (r == 4));
  torch::manual_seed(dora ? 4 : 1);
  LowRankProjections m;
  const auto lora = with_branches(m, dora, r);
  const auto x = torch::randn({2, 5, 16});
  const auto want = run_low_rank(m, lora, x, /*formula=*/true, false);
  // outputs, x, three biases, A and B of two branches (and DoRA's two magnitudes)
  REQUIRE(want.size() == 3 + 1 + 3 + 4 + (dora ? 2u : 0u));

  bool kernel = false;
  SECTION("grouped, fp32") {
    check_near_formula(run_low_rank(m, lora, x, false, false, /*grouped=*/true, &kernel), want, 1e-5);
    CHECK(kernel);
  }
  SECTION("each layer alone (LoraBranch's forward), fp32") {
    check_near_formula(run_low_rank(m, lora, x, false, false, /*grouped=*/false, &kernel), want, 1e-5);
    CHECK(kernel);
  }
  SECTION("under bf16 autocast, against the formula under autocast") {
    const auto want_bf16 = run_low_rank(m, lora, x, true, true);
    CHECK(want_bf16[0].scalar_type() == torch::kBFloat16);
    check_near_formula(run_low_rank(m, lora, x, false, true, true, &kernel), want_bf16, 2e-2);
    CHECK(kernel);
    check_near_formula(run_low_rank(m, lora, x, false, true, false), want_bf16, 2e-2);
  }
  SECTION("without gradient mode (inference): the merged GEMM alone") {
    torch::NoGradGuard no_grad;
    const auto out = ftopt::nn::shared_input_linears<3>(m.layers(), x);
    for (std::size_t i = 0; i < 3; ++i) CHECK(torch::allclose(out[i], want[i], 1e-5, 1e-5));
  }
  SECTION("KernelOptions::merged_weight off: the layer-by-layer path (DoRA's own forward), the same values") {
    LowRankProjections twin;
    const auto twin_lora = with_branches(twin, dora, r, {.merged_weight = false});
    {
      torch::NoGradGuard no_grad;
      for (auto& item : twin.named_parameters()) item.value().copy_(m.named_parameters()[item.key()]);
    }
    check_near_formula(run_low_rank(twin, twin_lora, x, false, false, true, &kernel), want, 1e-5);
    CHECK_FALSE(kernel);
  }
}

TEST_CASE("The adapter kernel trains a LoRA branch on a Linear without bias", "[peft][kernel]") {
  // A custom autograd function takes no undefined tensor as an input: the missing bias is none.
  torch::manual_seed(2);
  torch::nn::Sequential net(ftopt::nn::Linear(torch::nn::LinearOptions(16, 12).bias(false)));
  ftopt::peft::Lora lora({.r = 4, .alpha = 8, .targets = {"0"}});
  lora.attach(*net);
  auto& branch = *lora.branches()[0].second;
  {
    torch::NoGradGuard no_grad;
    branch.b()->weight.normal_();
  }
  const auto& w = net[0]->as<ftopt::nn::LinearImpl>()->weight;
  auto x = torch::randn({3, 16}).requires_grad_(true);
  const auto y = net->forward(x);
  CHECK(from_low_rank_kernel(y));
  auto a = branch.a()->weight.detach().clone().requires_grad_(true);
  auto b = branch.b()->weight.detach().clone().requires_grad_(true);
  auto x2 = x.detach().clone().requires_grad_(true);
  const auto want = at::linear(x2, w) + 2.0 * at::linear(at::linear(x2, a), b);
  CHECK(torch::allclose(y, want, 1e-5, 1e-5));
  const auto g = torch::randn_like(want);
  (y * g).sum().backward();
  (want * g).sum().backward();
  CHECK(torch::allclose(x.grad(), x2.grad(), 1e-5, 1e-5));
  CHECK(torch::allclose(branch.a()->weight.grad(), a.grad(), 1e-4, 1e-5));
  CHECK(torch::allclose(branch.b()->weight.grad(), b.grad(), 1e-4, 1e-5));
}

TEST_CASE("The adapter kernel is not used where the formula would not hold", "[peft][kernel]") {
  torch::manual_seed(2);
  LowRankProjections m;
  const auto x = torch::randn({4, 16});
  SECTION("LoRA dropout while training: the branch sees dropped inputs, the base layer does not") {
    ftopt::peft::Lora lora({.r = 4, .alpha = 8, .dropout = 0.5, .targets = {"query", "value"}});
    lora.attach(m);
    const auto& branch = *lora.branches()[0].second;
    CHECK_FALSE(has_low_rank_term(branch, *m.query));
    CHECK_FALSE(grouped_in_kernel(m));
    m.eval();  // dropout off: the formula holds again
    CHECK(has_low_rank_term(branch, *m.query));
    CHECK(grouped_in_kernel(m));
  }
  SECTION("a base weight that trains (its gradient would be needed)") {
    auto lora = with_branches(m);
    m.key->weight.requires_grad_(true);
    CHECK_FALSE(grouped_in_kernel(m));
    const auto out = run_low_rank(m, lora, x, false, false);
    CHECK(from_low_rank_kernel(out[0]));        // query alone, its own weight frozen
    CHECK_FALSE(from_low_rank_kernel(out[1]));  // key, whose weight trains, by itself
    check_near_formula(out, run_low_rank(m, lora, x, true, false), 1e-5);
  }
  SECTION("merged branches or no branch at all: a plain GEMM suffices") {
    CHECK_FALSE(grouped_in_kernel(m));  // nothing attached (and weights train)
    auto lora = with_branches(m);
    lora.merge(m);
    CHECK_FALSE(grouped_in_kernel(m));
  }
}
