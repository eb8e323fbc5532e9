// Must not compile: pin_memory() before batch() (it takes batches).
#include <ftopt/pipeline.hpp>

int main() {
  using namespace ftopt::pipeline;
  auto samples = from(at::zeros({4, 1, 2, 2}), at::arange(4)) | pin_memory();
}
