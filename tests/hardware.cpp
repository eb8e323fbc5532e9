// Tests for include/ftopt/hardware.hpp.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <filesystem>

#include <ATen/Parallel.h>

#include <ftopt/hardware.hpp>

#include "support.hpp"

TEST_CASE("configure sets intra-op threads and reports the machine", "[hardware]") {
  const int before = at::get_num_threads();
  auto report = ftopt::hardware::configure({.threads = 2});
  CHECK(at::get_num_threads() == 2);
  CHECK(report.threads == 2);
  CHECK_THAT(report.summary(), Catch::StartsWith(std::string("LibTorch ") + TORCH_VERSION) &&
                                   Catch::Contains("| threads 2 |"));
  auto automatic = ftopt::hardware::configure();
  CHECK(automatic.threads >= 1);
  CHECK(automatic.threads <= ftopt::hardware::available_cpus());
  at::set_num_threads(before);
}

TEST_CASE("ftopt's kernels run on LibTorch's intra-op threads", "[hardware]") {
  // at::parallel_for, which ftopt's kernels call, is inline in ATen's headers: where LibTorch
  // threads with OpenMP, a file compiled without it runs every chunk on the calling thread.
  // ftopt's CMake package compiles OpenMP in; two chunks on two threads then run on two.
  CHECK(ftopt::hardware::kernels_threaded);
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  std::array<std::atomic<int>, 2> ran_on{-1, -1};
  at::parallel_for(0, 2, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) ran_on[static_cast<std::size_t>(i)] = at::get_thread_num();
  });
  at::set_num_threads(before);
  CHECK(ran_on[0] == 0);
  CHECK(ran_on[1] == 1);
}

TEST_CASE("the BLAS in the report is the one ATen loaded", "[hardware]") {
  // The pip wheel's LibTorch carries MKL inside; Debian's calls libblas.so.3, and with
  // libopenblas0-openmp installed (the set-up script installs it) the alternative points at
  // OpenBLAS, which the report must name.
  const auto blas = ftopt::hardware::configure().blas;
  CAPTURE(blas);
  if (at::hasMKL())
    CHECK_THAT(blas, Catch::Contains("MKL"));
  else if (std::filesystem::exists("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3"))
    CHECK_THAT(blas, Catch::Contains("OpenBLAS"));
  CHECK_FALSE(blas.empty());
}

TEST_CASE("configure rejects a negative thread count", "[hardware][errors]") {
  CHECK_THAT(ftopt::test::message_of([] { ftopt::hardware::configure({.threads = -3}); }),
             Catch::Contains("threads must be >= 0 (0 = automatic), got -3"));
}
