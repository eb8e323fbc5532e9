// The C++ side of tests/peer/schedule.py: Trainer<> fits models::Mlp for 2 epochs of 7 batches
// with torch::optim::SGD over two parameter groups (weights lr 0.3, biases lr 0.1), once per
// schedule, and writes each group's lr at every optimizer step.
//   peer_schedule lrs WARMUP WORK
#include <string>
#include <vector>

#include <torch/torch.h>

#include <ftopt/data/tensor_batches.hpp>
#include <ftopt/models/mlp.hpp>
#include <ftopt/schedule/constant_with_warmup.hpp>
#include <ftopt/schedule/step_decay.hpp>
#include <ftopt/schedule/warmup_cosine.hpp>
#include <ftopt/schedule/warmup_linear.hpp>
#include <ftopt/trainer.hpp>

#include "peer.hpp"

namespace {

/// Each parameter group's lr after every step (the lr that step used).
struct GroupLrs {
  torch::optim::Optimizer* optimizer;
  std::vector<std::vector<double>>* lrs;
  void on_step_end(const ftopt::FitState&) {
    std::vector<double> now;
    for (auto& group : optimizer->param_groups()) now.push_back(group.options().get_lr());
    lrs->push_back(now);
  }
};

torch::Tensor lrs_under(const ftopt::schedule::Schedule& schedule) {
  torch::manual_seed(0);
  ftopt::models::Mlp model({.in = 4, .hidden = {8}, .out = 3});
  ftopt::data::TensorBatches batches(torch::randn({28, 4}), torch::randint(0, 3, {28}), {.batch_size = 4, .shuffle = false});
  ftopt::Trainer<> trainer({.epochs = 2, .schedule = schedule, .device = torch::kCPU, .report_hardware = false});
  std::vector<torch::Tensor> weights, biases;
  for (const auto& item : model->named_parameters())
    (item.key().ends_with("bias") ? biases : weights).push_back(item.value());
  trainer.prepare(model);
  torch::optim::SGD optimizer({torch::optim::OptimizerParamGroup(weights, std::make_unique<torch::optim::SGDOptions>(0.3)),
                               torch::optim::OptimizerParamGroup(biases, std::make_unique<torch::optim::SGDOptions>(0.1))},
                              torch::optim::SGDOptions(0.3));
  std::vector<std::vector<double>> lrs;
  trainer.fit(model, optimizer, batches, GroupLrs{&optimizer, &lrs});
  auto out = torch::empty({static_cast<std::int64_t>(lrs.size()), 2}, torch::kDouble);
  for (std::size_t k = 0; k < lrs.size(); ++k)
    for (std::size_t g = 0; g < 2; ++g) out[static_cast<std::int64_t>(k)][static_cast<std::int64_t>(g)] = lrs[k][g];
  return out;
}

void lrs(const std::vector<std::string>& args, const std::filesystem::path& work) {
  namespace s = ftopt::schedule;
  const std::int64_t warmup = std::stoll(args.at(0));
  ftopt::peer::save(work, "ftopt.safetensors",
                    {{"cosine", lrs_under(s::WarmupCosine{.warmup_steps = warmup})},
                     {"cosine_min_lr", lrs_under(s::WarmupCosine{.warmup_steps = warmup, .min_lr_ratio = 0.1})},
                     {"linear", lrs_under(s::WarmupLinear{.warmup_steps = warmup})},
                     {"constant", lrs_under(s::ConstantWithWarmup{.warmup_steps = warmup})},
                     {"step", lrs_under(s::StepDecay{.step_size = 4, .gamma = 0.5})}});
}

} // namespace

int main(int argc, char** argv) { return ftopt::peer::main(argc, argv, {{"lrs", lrs}}); }
