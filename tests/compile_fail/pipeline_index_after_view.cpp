// Must not compile: batch() computes samples by index, and a range view before it is not indexed.
#include <range/v3/view/take.hpp>

#include <ftopt/pipeline.hpp>

int main() {
  using namespace ftopt::pipeline;
  auto batches = from(at::zeros({4, 1, 2, 2}), at::arange(4)) | ranges::views::take(2) | batch(2);
}
