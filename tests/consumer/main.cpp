// Builds against the installed package and trains two steps; prints "consumer ok".
#include <iostream>

#include <torch/torch.h>

#include <ftopt.hpp>

int main() {
  ftopt::Trainer<> trainer({.report_hardware = false});
  ftopt::models::Mlp model({.in = 4, .hidden = {8}, .out = 3});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches{
      {torch::randn({8, 4}), torch::randint(0, 3, {8})}};
  auto summary = trainer.fit(model, optimizer, batches);
  std::cout << "consumer ok: " << summary.epochs.size() << " epoch\n";
  return summary.epochs.size() == 1 ? 0 : 1;
}
