// Tests for include/ftopt/axis.hpp: a policy names its axis with `using axis = ...`, the concepts
// read that name (and nothing else), and validate_policies calls each policy's validate() where
// it has one, in the order given.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "support.hpp"

using namespace ftopt;

namespace {

/// Declares the Peft axis and nothing else: AnyPolicy and PolicyOf ask for the name only.
struct NamesPeft {
  using axis = ftopt::axis::Peft;
};
struct NoAxis {};

/// Policies that log their validate() (or have none).
struct Checked {
  std::vector<std::string>* log;
  std::string name;
  bool ok = true;
  void validate() const {
    log->push_back(name);
    ftopt::check(ok, name, ": not ok");
  }
};
struct Unchecked {
  int value = 0;
};

} // namespace

TEST_CASE("A policy declares its axis by name, and models only that axis", "[axis]") {
  STATIC_REQUIRE(AnyPolicy<NamesPeft>);
  STATIC_REQUIRE(PolicyOf<NamesPeft, axis::Peft>);
  STATIC_REQUIRE_FALSE(PolicyOf<NamesPeft, axis::Memory>);
  STATIC_REQUIRE_FALSE(AnyPolicy<NoAxis>);
  STATIC_REQUIRE_FALSE(PolicyOf<NoAxis, axis::Peft>);
  // The baselines, each in its own slot and no other.
  STATIC_REQUIRE(PolicyOf<precision::Fp32, axis::Precision>);
  STATIC_REQUIRE(PolicyOf<peft::Full, axis::Peft>);
  STATIC_REQUIRE(PolicyOf<memory::None, axis::Memory>);
  STATIC_REQUIRE(PolicyOf<parallel::Single, axis::Parallel>);
  STATIC_REQUIRE(PolicyOf<quant::None, axis::Quant>);
  STATIC_REQUIRE_FALSE(PolicyOf<quant::None, axis::Memory>);
  STATIC_REQUIRE_FALSE(PolicyOf<memory::None, axis::Quant>);
  // The axes are five distinct tags.
  CHECK_FALSE(std::is_same_v<axis::Precision, axis::Peft>);
  CHECK_FALSE(std::is_same_v<axis::Memory, axis::Quant>);
}

TEST_CASE("validate_policies calls validate() where a policy has one, in order, and stops at the first error",
          "[axis][errors]") {
  std::vector<std::string> log;
  SECTION("all valid: each validate() once, in the order given; the others are skipped") {
    ftopt::detail::validate_policies(Checked{&log, "first"}, Unchecked{}, Checked{&log, "second"});
    CHECK(log == std::vector<std::string>{"first", "second"});
  }
  SECTION("the first error propagates; later policies are not validated") {
    CHECK_THAT(test::message_of([&] {
                 ftopt::detail::validate_policies(Checked{&log, "a"}, Checked{&log, "b", false}, Checked{&log, "c"});
               }),
               Catch::Equals("b: not ok"));
    CHECK(log == std::vector<std::string>{"a", "b"});
  }
}
