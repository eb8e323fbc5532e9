// Tests for include/ftopt/precision/bf16_mixed.hpp: bf16 autocast forward, fp32 loss and
// gradients, in the Trainer.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/precision/bf16_mixed.hpp>
#include <ftopt/precision/fp32.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {

/// Gradients of one cross-entropy backward, in parameter order.
template <class Precision>
std::vector<torch::Tensor> gradients(models::ViT& model, Precision precision, const torch::Tensor& x, const torch::Tensor& y) {
  precision.prepare(*model);
  for (auto& p : model->parameters()) p.mutable_grad().reset();
  torch::Tensor out;
  {
    [[maybe_unused]] auto scope = precision.forward_scope();
    out = model->forward(x);
  }
  torch::nn::functional::cross_entropy(precision.loss_input(out), y).backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

} // namespace

TEST_CASE("Bf16Mixed: bf16 forward, fp32 loss and gradients close to fp32's", "[precision][bf16]") {
  torch::manual_seed(3);
  auto x = torch::randn({16, 1, 28, 28});
  auto y = torch::randint(0, 10, {16});
  auto model = test::tiny_vit(1, 32);
  auto fp32 = gradients(model, precision::Fp32{}, x, y);
  auto bf16 = gradients(model, precision::Bf16Mixed{}, x, y);
  // bf16 keeps 8 significant bits (relative rounding 2^-8 = 0.4% per op); summed over a
  // 2-layer network the gradient as a whole stays within a few percent.
  double num = 0, den = 0;
  for (std::size_t i = 0; i < fp32.size(); ++i) {
    CHECK(bf16[i].scalar_type() == torch::kFloat);  // fp32 master gradients
    num += (bf16[i] - fp32[i]).pow(2).sum().item<double>();
    den += fp32[i].pow(2).sum().item<double>();
  }
  CHECK(std::sqrt(num / den) < 0.03);
  CHECK(std::sqrt(num / den) > 0.0);  // it did run in bf16

  precision::Bf16Mixed policy;
  policy.prepare(*model);
  {
    [[maybe_unused]] auto scope = policy.forward_scope();
    CHECK(model->vit->encoder_layer(0).attention->attention->query(torch::randn({2, 5, 32})).scalar_type() ==
          torch::kBFloat16);
    auto logits = model->forward(x);
    CHECK(policy.loss_input(logits).scalar_type() == torch::kFloat);
  }
  CHECK_FALSE(compat::autocast_enabled(torch::kCPU));  // the scope closed
}

TEST_CASE("Trainer<Bf16Mixed> trains, autocast is off between steps", "[precision][bf16]") {
  auto model = test::tiny_vit(2, 32);
  Trainer<precision::Bf16Mixed> trainer({.epochs = 3, .device = torch::kCPU, .report_hardware = false});
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(3e-3));
  torch::manual_seed(4);
  test::Batches batches{{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32})}};
  auto summary = trainer.fit(model, optimizer, batches);
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  CHECK_FALSE(compat::autocast_enabled(torch::kCPU));
  for (auto& p : model->parameters()) CHECK(p.scalar_type() == torch::kFloat);
}
