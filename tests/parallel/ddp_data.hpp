#pragma once
// What the DDP tests and their worker processes (ddp_worker.cpp) must agree on: the model, the
// data, the optimizer. A rank trains on its shard; the test trains one process on all of it.
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/models/mlp.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/peft/qlora.hpp>
#include <ftopt/trainer_options.hpp>

namespace ftopt::test::ddp {

/// Samples per optimizer step, over all ranks (the single-process reference's batch).
inline constexpr std::int64_t kBatch = 32;

/// The same weights in every process; different on each rank before DDP's broadcast would be
/// the stronger test, so ranks other than 0 start from another seed.
inline models::Mlp model(std::uint64_t seed = 1) {
  torch::manual_seed(seed);
  return models::Mlp({.in = 6, .hidden = {16, 16}, .out = 3});
}

/// `steps` batches of kBatch samples, the same in every process.
inline std::pair<torch::Tensor, torch::Tensor> data(std::int64_t steps) {
  auto generator = at::detail::createCPUGenerator(7);
  auto x = torch::randn({steps * kBatch, 6}, generator);
  auto y = torch::randint(3, {steps * kBatch}, generator);
  return {x, y};
}

inline TrainerOptions trainer_options(std::int64_t epochs) {
  TrainerOptions options;
  options.epochs = epochs;
  options.report_hardware = false;
  options.device = torch::kCPU;
  return options;
}

/// SGD with momentum: a step depends on the gradients' history, so any difference shows.
inline std::unique_ptr<torch::optim::SGD> optimizer(const std::vector<torch::Tensor>& params) {
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

/// LoRA on the first and last Linear (module names "layers.0" and "layers.4").
inline peft::Lora lora() { return peft::Lora({.r = 2, .alpha = 4, .targets = {"0", "4"}}); }

/// The same over a base held in int8 per channel.
inline peft::QLora<quant::Int8PerChannel> qlora() { return {lora().options()}; }

} // namespace ftopt::test::ddp
