// Must not compile: batches that are bare tensors, with no target to compute a loss against.
#include <vector>

#include <torch/torch.h>

#include <ftopt/models/mlp.hpp>
#include <ftopt/trainer.hpp>

int main() {
  ftopt::Trainer<> trainer;
  ftopt::models::Mlp model({.in = 4, .hidden = {4}, .out = 2});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  std::vector<torch::Tensor> inputs_only{torch::randn({2, 4})};
  trainer.fit(model, optimizer, inputs_only);
}
