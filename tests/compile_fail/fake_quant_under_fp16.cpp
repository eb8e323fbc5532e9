// Must not compile: a QAT-style quant policy (fake_quant_training) under an fp16-autocast
// precision policy. Both policies are complete; only the combination is forbidden.
#include <ftopt/trainer.hpp>

struct Fp16Autocast : ftopt::precision::Fp32 {
  static constexpr c10::ScalarType autocast_dtype = c10::ScalarType::Half;
};

struct FakeQuantTraining : ftopt::quant::None {
  static constexpr bool fake_quant_training = true;
};

static_assert(ftopt::precision::Policy<Fp16Autocast>);
static_assert(ftopt::quant::Policy<FakeQuantTraining>);

int main() {
  ftopt::Trainer<Fp16Autocast, ftopt::peft::Full, ftopt::memory::None, ftopt::parallel::Single,
                 FakeQuantTraining>
      trainer;
  (void)trainer;
}
