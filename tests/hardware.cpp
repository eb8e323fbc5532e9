// Tests for include/ftopt/hardware.hpp.
#include <catch2/catch.hpp>

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
