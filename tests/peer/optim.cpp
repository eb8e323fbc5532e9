// The C++ side of tests/peer/optim.py: Trainer<Probed> (precision::Fp32 plus two probes) trains
// models::Mlp from the Python side's weights with torch::optim::AdamW, TrainerOptions
// clip_grad_norm and schedule::WarmupCosine (total_steps derived from the batches), and writes
// per step the lr, the total gradient norm before clipping, the clipped gradients and the weights.
//   peer_optim train LR BETA1 BETA2 EPS WEIGHT_DECAY WARMUP MAX_NORM WORK
//
// FitState carries the lr but not the gradient norm, so the probes read them at the Trainer's
// own hooks: unscale runs just before clipping, step just after clipping and the schedule.
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/detail/clip_grad_norm.hpp>
#include <ftopt/models/mlp.hpp>
#include <ftopt/precision/fp32.hpp>
#include <ftopt/trainer.hpp>

#include "peer.hpp"

namespace {

struct Record {
  torch::nn::Module* model = nullptr;
  std::vector<torch::Tensor> norms;
  std::vector<double> optimizer_lrs, fit_state_lrs;
  ftopt::weights::StateDict tensors = ftopt::weights::StateDict();

  std::string step_key(std::size_t k, const std::string& what, const std::string& name) const {
    return "step" + std::to_string(k) + "." + what + "." + name;
  }
};

/// precision::Fp32 that reports what the Trainer clips and steps with.
struct Probed : ftopt::precision::Fp32 {
  Record* record = nullptr;

  /// The total norm of the gradients about to be clipped, by ftopt's clip_grad_norm with an
  /// infinite max_norm (which multiplies every gradient by exactly 1).
  void unscale(torch::optim::Optimizer& optimizer) {
    std::vector<torch::Tensor> params;
    for (auto& group : optimizer.param_groups())
      for (auto& p : group.params()) params.push_back(p);
    record->norms.push_back(ftopt::detail::clip_grad_norm(params, std::numeric_limits<double>::infinity()));
  }
  /// The clipped gradients and the lr the schedule set, then the step.
  bool step(torch::optim::Optimizer& optimizer) {
    const std::size_t k = record->optimizer_lrs.size();
    record->optimizer_lrs.push_back(optimizer.param_groups().at(0).options().get_lr());
    for (const auto& item : record->model->named_parameters())
      record->tensors.insert(record->step_key(k, "grads", item.key()), item.value().grad().clone());
    return Fp32::step(optimizer);
  }
};

/// FitState::lr and the weights after every step.
struct AfterStep {
  Record* record;
  void on_step_end(const ftopt::FitState& state) {
    const std::size_t k = record->fit_state_lrs.size();
    record->fit_state_lrs.push_back(state.lr);
    for (const auto& item : record->model->named_parameters())
      record->tensors.insert(record->step_key(k, "weights", item.key()), item.value().detach().clone());
  }
};

void train(const std::vector<std::string>& args, const std::filesystem::path& work) {
  using namespace ftopt;
  if (args.size() != 7) throw std::runtime_error("train needs LR BETA1 BETA2 EPS WEIGHT_DECAY WARMUP MAX_NORM");
  models::Mlp model({.in = 8, .hidden = {32}, .out = 4});
  weights::load(*model, work / "weights.safetensors");
  const auto batches_file = peer::load(work, "batches.safetensors");
  const torch::Tensor x = batches_file["x"], y = batches_file["y"];
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (std::int64_t k = 0; k < x.size(0); ++k) batches.emplace_back(x[k], y[k]);

  Record record{.model = model.get()};
  Probed probed;
  probed.record = &record;
  Trainer<Probed> trainer({.clip_grad_norm = std::stod(args[6]),
                           .schedule = schedule::WarmupCosine{.warmup_steps = std::stoll(args[5])},
                           .device = torch::kCPU,
                           .report_hardware = false},
                          probed);
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(std::stod(args[0]))
                                                            .betas({std::stod(args[1]), std::stod(args[2])})
                                                            .eps(std::stod(args[3]))
                                                            .weight_decay(std::stod(args[4])));
  trainer.fit(model, optimizer, batches, AfterStep{&record});

  weights::StateDict out = std::move(record.tensors);
  out.insert("norm", torch::stack(record.norms));
  out.insert("optimizer_lr", torch::tensor(record.optimizer_lrs, torch::kDouble));
  out.insert("fit_state_lr", torch::tensor(record.fit_state_lrs, torch::kDouble));
  for (const auto& item : model->named_parameters()) out.insert("final." + item.key(), item.value().detach().clone());
  peer::save(work, "ftopt.safetensors", out);
}

} // namespace

int main(int argc, char** argv) { return ftopt::peer::main(argc, argv, {{"train", train}}); }
