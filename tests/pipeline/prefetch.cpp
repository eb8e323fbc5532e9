// Tests for include/ftopt/pipeline/prefetch.hpp: order kept with any worker count
// (torch.utils.data.DataLoader's), a worker's exception at its element, an early exit joins the
// workers.
#include "stages.hpp"

#include <chrono>
#include <random>
#include <set>
#include <thread>

#include <unistd.h>

TEST_CASE("prefetch keeps the order and the values of the plain pass, with any worker count", "[pipeline][prefetch]") {
  const AugmentOptions noise{.seed = 5, .custom = [](Sample s, std::mt19937_64& rng) {
                                s.data = s.data + static_cast<double>(rng() % 1000);
                                return s;
                              }};
  auto plain = numbered(37) | shuffle(1) | augment(noise) | batch(4);
  std::vector<at::Tensor> want;
  for (const auto& b : plain) want.push_back(b.first);
  for (int workers : {1, 2, 4}) {
    auto fast = numbered(37) | shuffle(1) | augment(noise) | batch(4) | prefetch({.workers = workers, .depth = 3});
    std::vector<at::Tensor> got;
    for (const auto& b : fast) got.push_back(b.first);
    INFO("workers " << workers);
    CHECK(test::same_values(want, got));
  }
  auto any_order = numbered(37) | batch(1) | prefetch({.workers = 3, .ordered = false});
  auto seen = targets_of(any_order);
  CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 37);
}

TEST_CASE("prefetch hands a worker's exception to the consumer at that element", "[pipeline][prefetch]") {
  Probe probe;
  probe.n = 20;
  probe.fail_at = 5;
  auto batches = std::move(probe) | batch(1) | prefetch({.workers = 3});
  std::vector<std::int64_t> delivered;
  CHECK_THAT(test::message_of([&] {
               for (const auto& b : batches) delivered.push_back(b.second.item<std::int64_t>());
             }),
             Contains("probe: sample 5 is broken"));
  CHECK(delivered == std::vector<std::int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("Leaving a prefetched loop early stops and joins the workers", "[pipeline][prefetch]") {
  Probe probe;
  probe.n = 1000;
  auto computed = probe.computed;
  auto batches = std::move(probe) | batch(1) | prefetch({.workers = 2, .depth = 4});
  int taken = 0;
  for (const auto& b : batches) {
    (void)b;
    if (++taken == 3) break;
  }
  // The pass was destroyed with the loop: its workers are joined, so the count is final and
  // at most what the window allowed.
  const int final_count = computed->load();
  CHECK(final_count <= 3 + 4 + 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(computed->load() == final_count);
}
