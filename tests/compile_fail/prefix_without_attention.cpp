// Must not compile: prefix tuning on a model without attention layers that take prefixes.
#include <ftopt/models/mlp.hpp>
#include <ftopt/peft/prefix.hpp>
#include <ftopt/trainer.hpp>

int main() {
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Prefix> trainer;
  ftopt::models::Mlp model({.in = 4, .hidden = {4}, .out = 2});
  trainer.prepare(model);
}
