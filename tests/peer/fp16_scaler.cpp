// The C++ side of tests/peer/fp16_scaler.py: Trainer<precision::Fp16Mixed> on the CPU trains
// models::Mlp from the Python side's weights on its batches, one optimizer step per batch, and
// writes after every step the loss scale, whether the step was skipped, the loss and the weights.
//   peer_fp16_scaler train INIT_SCALE GROWTH_FACTOR BACKOFF_FACTOR GROWTH_INTERVAL LR MOMENTUM WORK
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/models/mlp.hpp>
#include <ftopt/precision/fp16_mixed.hpp>
#include <ftopt/trainer.hpp>

#include "peer.hpp"

namespace {

using Fp16Trainer = ftopt::Trainer<ftopt::precision::Fp16Mixed>;

/// Reads the scaler and the weights after every step (on_step_end runs after the update).
struct Recorder {
  Fp16Trainer* trainer;
  torch::nn::Module* model;
  std::vector<double> scales;
  std::vector<torch::Tensor> skipped;  ///< bool scalars
  std::vector<torch::Tensor> losses;
  ftopt::weights::StateDict weights = ftopt::weights::StateDict();

  void on_step_end(const ftopt::FitState& state) {
    const auto& scaler = trainer->precision().grad_scaler();
    const auto k = static_cast<std::int64_t>(scales.size());
    scales.push_back(scaler.current_scale());
    skipped.push_back(torch::tensor(scaler.last_step_skipped()));
    losses.push_back(state.loss.clone());
    for (const auto& item : model->named_parameters())
      weights.insert("step" + std::to_string(k) + "." + item.key(), item.value().detach().clone());
  }
};

void train(const std::vector<std::string>& args, const std::filesystem::path& work) {
  using namespace ftopt;
  if (args.size() != 6)
    throw std::runtime_error("train needs INIT_SCALE GROWTH_FACTOR BACKOFF_FACTOR GROWTH_INTERVAL LR MOMENTUM");
  models::Mlp model({.in = 8, .hidden = {16}, .out = 4});
  weights::load(*model, work / "weights.safetensors");
  const auto batches_file = peer::load(work, "batches.safetensors");
  const torch::Tensor x = batches_file["x"], y = batches_file["y"];
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (std::int64_t k = 0; k < x.size(0); ++k) batches.emplace_back(x[k], y[k]);

  precision::Fp16Mixed fp16;
  fp16.scaler = {.init_scale = std::stod(args[0]),
                 .growth_factor = std::stod(args[1]),
                 .backoff_factor = std::stod(args[2]),
                 .growth_interval = std::stoll(args[3])};
  Fp16Trainer trainer({.device = torch::kCPU, .report_hardware = false}, fp16);
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(std::stod(args[4])).momentum(std::stod(args[5])));
  Recorder recorder{&trainer, model.get()};
  const auto summary = trainer.fit(model, optimizer, batches, recorder);
  weights::StateDict out = std::move(recorder.weights);
  out.insert("scale", torch::tensor(recorder.scales, torch::kDouble));
  out.insert("skipped", torch::stack(recorder.skipped));
  out.insert("loss", torch::stack(recorder.losses));
  out.insert("epoch_skipped_steps", torch::tensor(summary.epochs.at(0).skipped_steps));
  for (const auto& item : model->named_parameters()) out.insert("final." + item.key(), item.value().detach().clone());
  peer::save(work, "ftopt.safetensors", out);
}

} // namespace

int main(int argc, char** argv) { return ftopt::peer::main(argc, argv, {{"train", train}}); }
