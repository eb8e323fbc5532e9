// Tests for include/ftopt/parallel/nccl.hpp: including it registers NCCL for parallel::Group where
// LibTorch was built with it; a group of one process then all-reduces a CUDA tensor to itself,
// and on a machine without a GPU joining is an ftopt::Error that names the group and carries
// NCCL's reason. A build without NCCL registers why, and joining says so.
// <torch/torch.h> before Catch, as in the other parallel tests.
#include <memory>
#include <vector>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <ftopt/parallel/nccl.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
std::shared_ptr<parallel::Group> join_nccl() {
  return parallel::Group::join(parallel::Environment{}, {.backend = parallel::Backend::Nccl});
}
} // namespace

TEST_CASE("nccl.hpp registers NCCL where LibTorch has it, and joining without a GPU says why", "[parallel]") {
#if defined(FTOPT_WITH_NCCL)
  REQUIRE(parallel::has_backend(parallel::Backend::Nccl));
  if (!torch::cuda::is_available())
    CHECK_THAT(test::message_of([] { join_nccl(); }),
               Contains("parallel: rank 0 of WORLD_SIZE=1 could not form the nccl group through 127.0.0.1:29500: ") &&
                   Contains("GPU"));
#else
  CHECK_FALSE(parallel::has_backend(parallel::Backend::Nccl));
  CHECK_THAT(test::message_of([] { join_nccl(); }),
             Contains("parallel::Group::join: this build has no nccl backend (NCCL needs a CUDA LibTorch built with "
                      "it and <nccl.h>)"));
#endif
}

TEST_CASE("CUDA: an NCCL group of one rank all-reduces a CUDA tensor to itself", "[parallel][cuda]") {
#if defined(FTOPT_WITH_NCCL)
  if (!torch::cuda::is_available()) {
    test::skip("no CUDA device");
    return;
  }
  const auto group = join_nccl();
  CHECK(group->backend() == parallel::Backend::Nccl);
  std::vector<at::Tensor> values{torch::tensor({1.5, -2.0}, torch::kCUDA)};
  group->get()->allreduce(values)->wait();
  CHECK(torch::equal(values[0].cpu(), torch::tensor({1.5, -2.0})));  // the sum over one rank
#else
  test::skip("this build has no NCCL");
#endif
}
