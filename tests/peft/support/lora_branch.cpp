// Tests for include/ftopt/peft/support/lora_branch.hpp: DoRA and the initialisations, against
// the formulas of PEFT 0.21 (peft/tuners/lora/dora.py, layer.py's pissa_init and olora_init)
// written out here; tests/peer/lora.py checks the same against the real PEFT.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/peft/lora.hpp>

#include "../../support.hpp"

using namespace ftopt;

namespace {

/// A one-layer net whose Linear is "0", with a LoRA branch attached.
struct Adapted {
  torch::nn::Sequential net;
  peft::Lora lora;
  nn::LinearImpl* layer;
  peft::LoraBranch* branch;

  Adapted(std::int64_t in, std::int64_t out, peft::LoraOptions options, std::uint64_t seed)
      : net((torch::manual_seed(seed), torch::nn::Sequential(nn::Linear(in, out)))), lora(std::move(options)) {
    lora.attach(*net);
    layer = net[0]->as<nn::LinearImpl>();
    branch = lora.branches().front().second.get();
  }
};

at::Tensor row_norms(const at::Tensor& w) { return w.pow(2).sum(1).sqrt(); }

} // namespace

TEST_CASE("DoRA computes m / ||W + s B A||_row (W + s B A) x + b, the norm detached", "[peft][lora][dora]") {
  Adapted adapted(6, 5, {.r = 2, .alpha = 6, .targets = {"0"}, .dora = true}, 21);
  auto& [net, lora, layer, branch] = adapted;
  const double s = 3.0;  // alpha / r
  // m starts as the row norms of W (B = 0), so the output is the layer's own.
  CHECK(torch::allclose(branch->magnitude(), row_norms(layer->weight), 1e-6, 1e-6));
  auto x = torch::randn({4, 6});
  CHECK(torch::allclose(net->forward(x), torch::linear(x, layer->weight, layer->bias), 1e-5, 1e-6));
  {
    torch::NoGradGuard no_grad;
    branch->b()->weight.normal_();
    branch->magnitude().uniform_(0.5, 2);
  }
  // The formula, on copies that autograd follows, with n computed and then detached.
  auto a = branch->a()->weight.detach().clone().requires_grad_();
  auto b = branch->b()->weight.detach().clone().requires_grad_();
  auto m = branch->magnitude().detach().clone().requires_grad_();
  auto adapted_w = layer->weight + s * torch::matmul(b, a);
  auto n = row_norms(adapted_w).detach();
  auto expected = torch::matmul(x, adapted_w.t()) * (m / n) + layer->bias;
  auto got = net->forward(x);
  CHECK(torch::allclose(got, expected, 1e-5, 1e-6));
  auto weights = torch::randn({4, 5});
  (got * weights).sum().backward();
  (expected * weights).sum().backward();
  CHECK(torch::allclose(branch->magnitude().grad(), m.grad(), 1e-5, 1e-6));
  CHECK(torch::allclose(branch->a()->weight.grad(), a.grad(), 1e-5, 1e-6));
  CHECK(torch::allclose(branch->b()->weight.grad(), b.grad(), 1e-5, 1e-6));
  CHECK(!layer->weight.grad().defined());

  // merge: W becomes (m / n) (W + s B A) as a column scale; unmerge restores W.
  auto w = layer->weight.detach().clone();
  lora.merge(*net);
  CHECK(torch::allclose(layer->weight, (m / n).unsqueeze(1).detach() * adapted_w.detach(), 1e-5, 1e-6));
  CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-5));
  lora.unmerge(*net);
  CHECK(torch::allclose(layer->weight, w, 1e-5, 1e-6));
  CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-5));
}

TEST_CASE("DoRA with dropout uses PEFT's form W x + b + (m/n - 1) W x' + (m/n) s B A x'", "[peft][lora][dora]") {
  Adapted adapted(6, 5, {.r = 2, .alpha = 2, .dropout = 0.5, .targets = {"0"}, .dora = true}, 22);
  auto& [net, lora, layer, branch] = adapted;
  {
    torch::NoGradGuard no_grad;
    branch->b()->weight.normal_();
    branch->magnitude().uniform_(0.5, 2);
  }
  net->train();
  auto x = torch::randn({8, 6});
  torch::manual_seed(5);
  auto got = net->forward(x);
  torch::manual_seed(5);
  auto dropped = ftopt::nn::dropout(x, 0.5, true);  // the same draw
  auto n = row_norms(layer->weight + torch::matmul(branch->b()->weight, branch->a()->weight));
  auto scale = branch->magnitude() / n;
  auto expected = torch::linear(x, layer->weight, layer->bias) + (scale - 1) * torch::linear(dropped, layer->weight) +
                  scale * torch::matmul(torch::matmul(dropped, branch->a()->weight.t()), branch->b()->weight.t());
  CHECK(torch::allclose(got, expected, 1e-5, 1e-6));
}

TEST_CASE("DoRA under autocast returns the base layer's dtype, as PEFT casts its result back", "[peft][lora][dora]") {
  Adapted adapted(6, 5, {.r = 2, .alpha = 6, .targets = {"0"}, .dora = true}, 23);
  auto& [net, lora, layer, branch] = adapted;
  {
    torch::NoGradGuard no_grad;
    branch->b()->weight.normal_();
    branch->magnitude().uniform_(0.5, 2);
  }
  auto x = torch::randn({4, 6});
  const auto expected = net->forward(x);  // float32, checked against the formula above
  Adapted with_dropout(6, 5, {.r = 2, .alpha = 6, .dropout = 0.5, .targets = {"0"}, .dora = true}, 24);
  with_dropout.net->train();  // PEFT's other form
  compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16);
  REQUIRE(torch::linear(x, layer->weight, layer->bias).scalar_type() == torch::kBFloat16);  // autocast's Linear
  const auto got = net->forward(x);
  CHECK(got.scalar_type() == torch::kBFloat16);
  CHECK(torch::allclose(got.to(torch::kFloat), expected, 2e-2, 2e-2));
  CHECK(with_dropout.net->forward(x).scalar_type() == torch::kBFloat16);
}

TEST_CASE("PiSSA puts the top-r SVD of W in B A and leaves the residual in the base", "[peft][lora][pissa]") {
  torch::manual_seed(23);
  nn::Linear reference(12, 9);
  const auto w = reference->weight.detach().clone();
  const auto singular = torch::linalg_svdvals(w);  // descending
  for (bool rslora : {false, true}) {
    INFO("rslora " << rslora);
    Adapted adapted(12, 9, {.r = 3, .alpha = 6, .targets = {"0"}, .rslora = rslora, .init = peft::LoraInit::Pissa}, 23);
    auto& [net, lora, layer, branch] = adapted;
    const double s = rslora ? 6 / std::sqrt(3.0) : 2.0;
    const auto& a = branch->a()->weight;
    const auto& b = branch->b()->weight;
    // A = sqrt(S_r / s) V_r^T and B = U_r sqrt(S_r / s): A A^T = B^T B = diag(S_r / s).
    const auto top = torch::diag(singular.slice(0, 0, 3) / s);
    CHECK(torch::allclose(torch::matmul(a, a.t()), top, 1e-4, 1e-5));
    CHECK(torch::allclose(torch::matmul(b.t(), b), top, 1e-4, 1e-5));
    // The residual holds the other singular values, and W is still residual + s B A.
    CHECK(torch::allclose(torch::linalg_svdvals(layer->weight).slice(0, 0, 6), singular.slice(0, 3, 9), 1e-4, 1e-5));
    CHECK(torch::allclose(layer->weight + s * torch::matmul(b, a), w, 1e-5, 1e-6));
    auto x = torch::randn({4, 12});
    CHECK(torch::allclose(net->forward(x), torch::linear(x, w, layer->bias), 1e-5, 1e-5));
  }
}

TEST_CASE("OLoRA takes B and A from the QR of W and leaves the residual in the base", "[peft][lora][olora]") {
  torch::manual_seed(24);
  nn::Linear reference(7, 10);
  const auto w = reference->weight.detach().clone();
  Adapted adapted(7, 10, {.r = 3, .alpha = 3, .targets = {"0"}, .init = peft::LoraInit::Olora}, 24);
  auto& [net, lora, layer, branch] = adapted;
  const auto& a = branch->a()->weight;
  const auto& b = branch->b()->weight;
  CHECK(torch::allclose(torch::matmul(b.t(), b), torch::eye(3), 1e-5, 1e-6));  // Q's columns: orthonormal
  CHECK(torch::equal(torch::tril(a, -1), torch::zeros({3, 7})));                // R's rows: upper triangular
  // Q R = W, so B A is W's part in the span of Q's first r columns: B^T W = A.
  CHECK(torch::allclose(torch::matmul(b.t(), w), a, 1e-5, 1e-5));
  CHECK(torch::allclose(layer->weight + torch::matmul(b, a), w, 1e-5, 1e-6));  // s = 1
}

TEST_CASE("Gaussian init draws A with std 1 / r and keeps B zero", "[peft][lora]") {
  Adapted adapted(256, 64, {.r = 4, .alpha = 8, .targets = {"0"}, .init = peft::LoraInit::Gaussian}, 25);
  const auto& a = adapted.branch->a()->weight;
  CHECK(a.std().item<double>() == Approx(0.25).epsilon(0.05));  // 1024 draws
  CHECK(std::abs(a.mean().item<double>()) < 0.03);
  CHECK(torch::equal(adapted.branch->b()->weight, torch::zeros({64, 4})));
}

TEST_CASE("Conv2d LoRA is conv(x) + s B(A(x)), A with the base's kernel, stride and padding, B 1x1", "[peft][lora][conv]") {
  torch::manual_seed(26);
  torch::nn::Sequential net(nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).stride(2).padding(1)));
  peft::Lora lora({.r = 2, .alpha = 4, .targets = {"0"}});
  lora.attach(*net);
  REQUIRE(lora.conv_branches().size() == 1);
  auto& branch = *lora.conv_branches().front().second;
  auto* layer = net[0]->as<nn::Conv2dImpl>();
  CHECK(branch.a()->weight.sizes() == torch::IntArrayRef({2, 3, 3, 3}));
  CHECK(branch.b()->weight.sizes() == torch::IntArrayRef({8, 2, 1, 1}));
  CHECK(torch::equal(branch.b()->weight, torch::zeros({8, 2, 1, 1})));
  for (const auto& item : net->named_parameters()) {
    INFO(item.key());
    CHECK(item.value().requires_grad() == (item.key().find(".lora_") != std::string::npos));
  }
  torch::NoGradGuard no_grad;
  branch.b()->weight.normal_();
  const double s = 2.0;
  auto x = torch::randn({2, 3, 9, 9});
  const auto& a = branch.a()->weight;
  const auto& b = branch.b()->weight;
  auto expected = torch::conv2d(x, layer->weight, layer->bias, 2, 1) + s * torch::conv2d(torch::conv2d(x, a, {}, 2, 1), b);
  CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-6));
  // merge: W + s sum_r B[o, r] A[r, i, kh, kw] (PEFT's get_delta_weight).
  auto w = layer->weight.clone();
  lora.merge(*net);
  CHECK(torch::allclose(layer->weight, w + s * torch::einsum("or,rikl->oikl", {b.flatten(1), a}), 1e-6, 1e-6));
  CHECK(torch::allclose(net->forward(x), expected, 1e-5, 1e-5));
  lora.unmerge(*net);
  CHECK(torch::allclose(layer->weight, w, 1e-6, 1e-6));
}

TEST_CASE("Conv2d LoRA names what it does not do", "[peft][lora][conv][errors]") {
  auto conv_net = [](std::int64_t groups) {
    return torch::nn::Sequential(nn::Conv2d(torch::nn::Conv2dOptions(4, 8, 3).groups(groups)));
  };
  const std::vector<std::pair<peft::LoraOptions, std::string>> cases = {
      {{.r = 2, .targets = {"0"}, .dora = true}, "Lora: use_dora is not supported on Conv2d layer '0'"},
      {{.r = 2, .targets = {"0"}, .init = peft::LoraInit::Pissa}, "Conv2d layer '0' takes the default or Gaussian one"},
      {{.r = 64, .targets = {"0"}}, "Lora: r = 64 is larger than layer '0' allows (8 x 36); choose r <= 8"},
  };
  for (const auto& [options, message] : cases) {
    INFO(message);
    auto net = conv_net(1);
    peft::Lora lora(options);
    CHECK_THAT(test::message_of([&] { lora.attach(*net); }), Catch::Contains(message));
    // Refused before anything changed: nothing attached, nothing frozen.
    CHECK(net[0]->as<nn::Conv2dImpl>()->extension() == nullptr);
    for (const auto& p : net->parameters()) CHECK(p.requires_grad());
  }
  auto grouped = conv_net(2);
  peft::Lora lora({.r = 2, .targets = {"0"}});
  CHECK_THAT(test::message_of([&] { lora.attach(*grouped); }),
             Catch::Contains("Lora: Conv2d layer '0' has groups = 2; LoRA adapts convolutions with groups = 1"));
}
