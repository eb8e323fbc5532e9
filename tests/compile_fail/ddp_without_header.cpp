// Must not compile: a Trainer over parallel::Ddp where only its declaration is seen (<ftopt.hpp>
// leaves <ftopt/parallel/ddp.hpp> out, with c10d).
#include <ftopt.hpp>

int main() {
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::None, ftopt::parallel::Ddp> trainer;
}
