// Must not compile: QAT (quant::Qat fake-quantizes the Linears' weights while training) over a
// quantized frozen base (peft::QLora), whose adapted Linears already hold their weights quantized.
#include <ftopt/peft/qlora.hpp>
#include <ftopt/quant/qat.hpp>
#include <ftopt/trainer.hpp>

int main() {
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::QLora<ftopt::storage::Nf4>, ftopt::memory::None,
                 ftopt::parallel::Single, ftopt::quant::Qat>
      trainer;
  (void)trainer;
}
