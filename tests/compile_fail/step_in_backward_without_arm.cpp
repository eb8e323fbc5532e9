// Must not compile: a Memory policy that declares steps_in_backward and has attach and disarm,
// but not arm(optimizer), the hook the Trainer calls before each backward.
#include <cstdint>
#include <vector>

#include <ftopt/trainer.hpp>

struct StepsWithoutArm {
  using axis = ftopt::axis::Memory;
  static constexpr bool steps_in_backward = true;
  template <class M>
  torch::Tensor forward(M& model, const torch::Tensor& input) {
    return model->forward(input);
  }
  std::int64_t accumulation() const { return 1; }
  void attach(const std::vector<torch::Tensor>&) {}
  std::int64_t disarm() { return 0; }
};

int main() {
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, StepsWithoutArm> trainer;
  (void)trainer;
}
