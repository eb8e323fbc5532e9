// Must not compile: a Quant policy that forgot convert(), the hook that produces the inference
// model.
#include <ftopt/trainer.hpp>

struct HalfDoneQuant {
  using axis = ftopt::axis::Quant;
  void prepare(torch::nn::Module&) {}
};

int main() {
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::None,
                 ftopt::parallel::Single, HalfDoneQuant>
      trainer;
  (void)trainer;
}
