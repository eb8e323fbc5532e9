#pragma once
// Each compiled copy of ftopt's CPU kernels (AVX-512, AVX2, baseline: detail/row_kernels.hpp)
// under its own tests, on every machine that runs it.
#include <catch2/catch.hpp>

#include <ftopt/detail/row_kernels.hpp>
#include <ftopt/kernel_options.hpp>

#include "support.hpp"

namespace ftopt::test {

/// check(isa), or a skip where this CPU cannot run the copy (scripts/test.sh lets only the
/// "AVX-512: ..." and "AVX2: ..." tests skip, besides the CUDA ones).
template <class Check>
void on_isa(CpuIsa isa, Check check) {
  if (!detail::cpu_runs(isa)) {
    skip(std::string("this CPU cannot run the ") + detail::isa_name(isa) + " copy");
    return;
  }
  INFO("the " << detail::isa_name(isa) << " copy");
  check(isa);
}

} // namespace ftopt::test

/// Three test cases, "AVX-512: NAME", "AVX2: NAME" and "baseline: NAME", each running
/// CHECK_FN(isa) on its copy.
#define FTOPT_TEST_EACH_ISA(NAME, TAGS, CHECK_FN)                                                      \
  TEST_CASE("AVX-512: " NAME, TAGS) { ::ftopt::test::on_isa(::ftopt::CpuIsa::Avx512, CHECK_FN); }     \
  TEST_CASE("AVX2: " NAME, TAGS) { ::ftopt::test::on_isa(::ftopt::CpuIsa::Avx2, CHECK_FN); }          \
  TEST_CASE("baseline: " NAME, TAGS) { ::ftopt::test::on_isa(::ftopt::CpuIsa::Baseline, CHECK_FN); }
