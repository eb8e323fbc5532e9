// Must not compile: a closure composed before its source still checks the order when applied:
// shuffle() after batch() (it orders samples).
#include <ftopt/pipeline.hpp>

int main() {
  using namespace ftopt::pipeline;
  auto prep = batch(2) | shuffle(1);
  auto batches = from(at::zeros({4, 1, 2, 2}), at::arange(4)) | prep;
}
