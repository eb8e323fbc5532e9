#pragma once
// What the DDP tests and their worker processes (ddp_worker.cpp) must agree on: the model, the
// data, the optimizer. A rank trains on its shard; the test trains one process on all of it.
// Two workloads: the small MLP on random features, and a small BERT on padded token sequences
// ([B, 2, T]: ids and attention mask), the text model's path through DDP.
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/models/bert.hpp>
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
inline peft::QLora<storage::Int8PerChannel> qlora() { return {lora().options()}; }

/// A BERT of 2 layers, width 16, 3 labels, mean pooling. Dropout is 0: a rank's masks over its
/// half-batch are not the single process's over the whole batch.
inline models::Bert bert(std::uint64_t seed = 1) {
  torch::manual_seed(seed);
  return models::Bert({.vocab_size = 40, .hidden = 16, .layers = 2, .heads = 4, .intermediate = 32, .dropout = 0.0,
                       .attention_dropout = 0.0, .max_position_embeddings = 16, .num_labels = 3,
                       .pooling = models::BertPooling::Mean});
}

/// `steps` batches of kBatch sequences of 12 positions as [N, 2, 12] (ids, mask): each sequence
/// [CLS] (1) + 2..11 random tokens + padding (0), the same in every process.
inline std::pair<torch::Tensor, torch::Tensor> bert_data(std::int64_t steps) {
  constexpr std::int64_t length = 12;
  auto generator = at::detail::createCPUGenerator(7);
  const std::int64_t n = steps * kBatch;
  auto ids = torch::randint(2, 40, {n, length}, generator);
  const auto kept = torch::randint(3, length + 1, {n, 1}, generator);
  const auto mask = torch::arange(length).unsqueeze(0).lt(kept).to(torch::kLong);
  ids = ids * mask;
  ids.select(1, 0).fill_(1);
  return {models::bert_input(ids, mask), torch::randint(3, {n}, generator)};
}

/// The PEFT recipe's targets on the BERT.
inline peft::Lora bert_lora() { return peft::Lora({.r = 2, .alpha = 4, .targets = {"query", "value"}}); }

/// The two workloads as the worker and the tests take them: a model from a seed, `steps` batches of data.
struct MlpWorkload {
  static models::Mlp model(std::uint64_t seed) { return ddp::model(seed); }
  static std::pair<torch::Tensor, torch::Tensor> data(std::int64_t steps) { return ddp::data(steps); }
};
struct BertWorkload {
  static models::Bert model(std::uint64_t seed) { return bert(seed); }
  static std::pair<torch::Tensor, torch::Tensor> data(std::int64_t steps) { return bert_data(steps); }
};

} // namespace ftopt::test::ddp
