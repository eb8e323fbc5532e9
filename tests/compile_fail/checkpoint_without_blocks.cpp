// Must not compile: checkpointing a model that is neither a torch::nn::Sequential nor declares
// checkpointable blocks.
#include <ftopt/memory/checkpoint.hpp>
#include <ftopt/models/mlp.hpp>
#include <ftopt/trainer.hpp>

int main() {
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::Checkpoint> trainer;
  ftopt::models::Mlp model({.in = 4, .hidden = {4}, .out = 2});
  trainer.prepare(model);
}
