// The laws of ftopt::parallel::Policy over every policy of the axis: Single in this process,
// Ddp on 2 real ranks over Gloo (ddp_worker.cpp --laws). laws.hpp measures each law's distance
// from the value autograd gives without any policy; here every rank's distances are checked.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <type_traits>
#include <vector>

#include <ftopt/parallel/ddp.hpp>
#include <ftopt/parallel/single.hpp>

#include "laws.hpp"
#include "ranks.hpp"

namespace {

using ftopt::test::laws::Distances;

/// Each rank's distances, and the world size the policy runs as here.
template <class P>
std::pair<std::vector<Distances>, std::int64_t> run_laws() {
  if constexpr (std::is_same_v<P, ftopt::parallel::Single>) {
    ftopt::parallel::Single single;
    return {{ftopt::test::laws::measure(single)}, 1};
  } else {
    ftopt::test::ScratchDir dir("parallel-laws");
    const auto ranks = ddp_test::run_workers(dir, {"--laws"});
    INFO("rank 0 log:\n" << ranks.logs[0] << "\nrank 1 log:\n" << ranks.logs[1]);
    REQUIRE(ranks.result.code() == 0);
    std::vector<Distances> out;
    for (int r = 0; r < 2; ++r) {
      auto saved = ddp_test::load(dir.path / ("rank" + std::to_string(r) + ".pt"));
      out.push_back({saved["rank"].item<std::int64_t>(), saved["world"].item<std::int64_t>(),
                     saved["broadcast"].item<double>(), saved["local"].item<double>(), saved["synced"].item<double>(),
                     saved["reduce"].item<double>()});
    }
    return {out, 2};
  }
}

} // namespace

TEMPLATE_TEST_CASE("Parallel laws: one weight set, local gradients under no_sync, the mean over ranks at sync, "
                   "reduce_sum the sum over ranks",
                   "[parallel][laws][processes]", ftopt::parallel::Single, ftopt::parallel::Ddp) {
  if (std::is_same_v<TestType, ftopt::parallel::Ddp> && !ddp_test::have_gloo()) return;
  const auto [ranks, world] = run_laws<TestType>();
  REQUIRE(static_cast<std::int64_t>(ranks.size()) == world);
  for (std::int64_t r = 0; r < world; ++r) {
    const Distances& d = ranks[static_cast<std::size_t>(r)];
    INFO("rank " << r);
    CHECK(d.rank == r);
    CHECK(d.world == world);
    CHECK(d.broadcast == 0.0);  // rank 0's weights, bit for bit
    CHECK(d.local <= 1e-7);
    CHECK(d.synced <= 1e-6);    // a float mean in another summation order
    CHECK(d.reduce <= 1e-12);
  }
}
