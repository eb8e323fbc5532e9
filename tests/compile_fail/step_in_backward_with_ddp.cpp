// Must not compile: the optimizer stepped in the backward (memory::OptimizerInBackward) with DDP,
// which all-reduces each gradient after it is complete: a parameter would step on its local one.
#include <ftopt/memory/optimizer_in_backward.hpp>
#include <ftopt/parallel/ddp.hpp>
#include <ftopt/trainer.hpp>

int main() {
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::OptimizerInBackward<>,
                 ftopt::parallel::Ddp>
      trainer;
  (void)trainer;
}
