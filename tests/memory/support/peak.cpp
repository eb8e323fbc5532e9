// Tests for include/ftopt/memory/support/peak.hpp.
#include <catch2/catch.hpp>

#include <thread>

#include <torch/torch.h>

#include <ftopt/memory/support/peak.hpp>

using ftopt::memory::PeakMemory;

TEST_CASE("PeakMemory counts CPU tensor bytes, on every thread", "[memory]") {
  PeakMemory::reset();
  const auto start = PeakMemory::current();
  {
    auto big = torch::empty({1024, 1024});  // 4 MiB
    CHECK(PeakMemory::current() - start == 4u << 20);
  }
  CHECK(PeakMemory::current() == start);
  CHECK(PeakMemory::peak() == 4u << 20);
  PeakMemory::reset();
  CHECK(PeakMemory::peak() == 0);
  std::thread([] { auto other = torch::empty({2 * 1024 * 1024}); }).join();  // 8 MiB elsewhere
  CHECK(PeakMemory::peak() == 8u << 20);
}
