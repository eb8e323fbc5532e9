// Must not compile: a Peft policy where the Precision policy goes (the axes are ordered).
#include <ftopt/trainer.hpp>

int main() {
  ftopt::Trainer<ftopt::peft::Full> trainer;
  (void)trainer;
}
