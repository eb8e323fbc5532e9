// Must not compile: a type that is no policy in the Memory slot.
#include <ftopt/trainer.hpp>

struct PlainSettings {
  int accumulate = 4;
};

int main() {
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, PlainSettings> trainer;
  (void)trainer;
}
