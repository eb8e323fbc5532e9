// Tests for include/ftopt/pipeline/order.hpp: shuffle and shard
// (torch.utils.data.DistributedSampler's drop_last=False padding and striding), shard from a
// Parallel policy.
#include "stages.hpp"

#include <set>

#include <ftopt/parallel/single.hpp>

TEST_CASE("shuffle: a permutation per epoch, the same for the same seed and epoch", "[pipeline]") {
  auto a = numbered(50) | shuffle(7) | batch(50);
  auto b = numbered(50) | shuffle(7) | batch(50);
  const auto first = targets_of(a), again = targets_of(b);
  CHECK(first == again);
  CHECK(std::set<std::int64_t>(first.begin(), first.end()).size() == 50);
  const auto second_pass = targets_of(a);  // the next epoch
  CHECK(second_pass != first);
  a.set_epoch(0);  // fit's set_epoch: epoch 0 again
  CHECK(targets_of(a) == first);
  auto other_seed = numbered(50) | shuffle(8) | batch(50);
  CHECK(targets_of(other_seed) != first);
}

TEST_CASE("shard: DistributedSampler's padding and striding", "[pipeline]") {
  // DistributedSampler(range(10), num_replicas=3, shuffle=False): indices + indices[:2], then
  // rank r takes indices[r::3].
  const std::vector<std::vector<std::int64_t>> expected = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  for (std::int64_t rank = 0; rank < 3; ++rank) {
    auto share = numbered(10) | shard(rank, 3) | batch(10);
    CHECK(targets_of(share) == expected[static_cast<std::size_t>(rank)]);
  }
  // Shuffled with one seed on every rank: equal shares, disjoint but for the padding, covering.
  std::multiset<std::int64_t> all;
  for (std::int64_t rank = 0; rank < 4; ++rank) {
    auto share = numbered(22) | shuffle(3) | shard(rank, 4) | batch(100);
    const auto got = targets_of(share);
    CHECK(got.size() == 6);
    all.insert(got.begin(), got.end());
  }
  CHECK(std::set<std::int64_t>(all.begin(), all.end()).size() == 22);
  CHECK(all.size() == 24);  // 2 padding repeats
  CHECK_THAT(test::message_of([] { numbered(5) | shard(3, 3); }), Contains("rank must be in [0, world), got rank 3 of world 3"));
}

TEST_CASE("shard takes the rank and world size from a Parallel policy", "[pipeline][ranges]") {
  // One rank: its share is the whole set, in order (DistributedSampler with num_replicas 1).
  auto all = numbered(7) | shard(parallel::Single{}) | batch(7);
  CHECK(targets_of(all) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6});
  // Two real ranks: tests/parallel/ddp_worker.cpp shards with shard(trainer.parallel()).
}
