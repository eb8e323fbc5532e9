// Tests for include/ftopt/precision/bf16_true.hpp: weights, gradients and optimizer state in bf16.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/precision/bf16_true.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("Bf16True keeps weights, gradients and optimizer state in bf16", "[precision][bf16]") {
  auto model = test::small_mlp();
  Trainer<precision::Bf16True> trainer({.epochs = 4, .device = torch::kCPU, .report_hardware = false});
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
  for (auto& p : model->parameters()) CHECK(p.scalar_type() == torch::kBFloat16);
  auto summary = trainer.fit(model, optimizer, test::random_batches(4, 16));
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  for (auto& p : model->parameters()) {
    auto& state = static_cast<torch::optim::AdamWParamState&>(*optimizer.state().at(ftopt::compat::optimizer_state_key(p)));
    CHECK(state.exp_avg().scalar_type() == torch::kBFloat16);
  }
}
