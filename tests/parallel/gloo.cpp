// Tests for include/ftopt/parallel/gloo.hpp: including it registers Gloo for parallel::Group, and
// the group it makes is a working c10d process group: two ranks (threads of this process over one
// in-memory store, on the loopback device MASTER_ADDR 127.0.0.1 selects) all-reduce by summing
// and broadcast from a root, as torch.distributed defines them. A build without Gloo's headers
// registers why, and joining says so.
// <torch/torch.h> before Catch, as in the other parallel tests.
#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <ftopt/parallel/gloo.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("Gloo: registered by its header, and two ranks all-reduce and broadcast", "[parallel]") {
#if defined(FTOPT_WITH_GLOO)
  REQUIRE(parallel::has_backend(parallel::Backend::Gloo));
  const auto store = c10::make_intrusive<c10d::HashStore>();
  const parallel::GroupOptions options{.backend = parallel::Backend::Gloo, .timeout = std::chrono::seconds(60)};
  const parallel::Environment env;  // MASTER_ADDR 127.0.0.1, as ftopt-launch sets it
  std::vector<at::Tensor> sums(2), broadcast(2);
  std::exception_ptr failed[2];
  auto run_rank = [&](int rank) {
    try {
      auto group = parallel::detail::make_gloo_group(store, rank, 2, options, env);
      std::vector<at::Tensor> sum{torch::tensor({1.0, 2.0}) * (rank == 0 ? 1 : 10)};
      group->allreduce(sum)->wait();
      sums[static_cast<std::size_t>(rank)] = sum[0];
      std::vector<at::Tensor> root_values{torch::full({3}, 5.0 + rank)};
      c10d::BroadcastOptions from_rank_1;
      from_rank_1.rootRank = 1;
      group->broadcast(root_values, from_rank_1)->wait();
      broadcast[static_cast<std::size_t>(rank)] = root_values[0];
    } catch (...) {
      failed[rank] = std::current_exception();
    }
  };
  std::thread second(run_rank, 1);
  run_rank(0);
  second.join();
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    CHECK(torch::equal(sums[static_cast<std::size_t>(rank)], torch::tensor({11.0, 22.0})));  // 1 + 10, 2 + 20
    CHECK(torch::equal(broadcast[static_cast<std::size_t>(rank)], torch::full({3}, 6.0)));   // rank 1's values
  }
#else
  CHECK_FALSE(parallel::has_backend(parallel::Backend::Gloo));
  CHECK_THAT(test::message_of([] {
               parallel::Group::join(parallel::Environment{}, {.backend = parallel::Backend::Gloo});
             }),
             Contains("this build has no gloo backend (Gloo's headers were not found") && Contains("libgloo-dev"));
#endif
}
