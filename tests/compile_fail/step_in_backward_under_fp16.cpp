// Must not compile: the optimizer stepped in the backward (memory::OptimizerInBackward) under fp16
// loss scaling, which skips a step when any gradient is inf or NaN: known only after the backward.
#include <ftopt/memory/optimizer_in_backward.hpp>
#include <ftopt/precision/fp16_mixed.hpp>
#include <ftopt/trainer.hpp>

int main() {
  ftopt::Trainer<ftopt::precision::Fp16Mixed, ftopt::peft::Full, ftopt::memory::OptimizerInBackward<>> trainer;
  (void)trainer;
}
