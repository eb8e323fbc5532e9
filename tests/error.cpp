// Tests for include/ftopt/error.hpp: fail() throws an ftopt::Error (a std::runtime_error) whose
// message is its parts as an std::ostream writes them, one after another; check() throws the
// same when its condition is false, and formats nothing when it is true.
#include <catch2/catch.hpp>

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <ftopt/error.hpp>

namespace {

/// Counts how often it is written to a stream.
struct Counted {
  int* writes;
};
std::ostream& operator<<(std::ostream& out, const Counted& c) {
  ++*c.writes;
  return out << "counted";
}

/// What fail(parts...) throws, as text.
template <class... Parts>
std::string failed_with(const Parts&... parts) {
  try {
    ftopt::fail(parts...);
  } catch (const ftopt::Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

} // namespace

TEST_CASE("fail: an ftopt::Error whose message is the parts streamed in order", "[error]") {
  STATIC_REQUIRE(std::is_base_of_v<std::runtime_error, ftopt::Error>);
  // Each part as `std::ostringstream() << part` writes it: literals, std::string and string_view,
  // integers, a double in the stream's default format, a char.
  const std::string file = "/data/x.idx";
  const std::string_view what = "wrong magic";
  CHECK(failed_with("read_idx: ", file, ": ", what, " 0x", 903) == "read_idx: /data/x.idx: wrong magic 0x903");
  CHECK(failed_with("--budget must be >= 0, got ", -2.5) == "--budget must be >= 0, got -2.5");
  CHECK(failed_with("a", 'b', std::int64_t{-7}, 1e-12) == "ab-71e-12");
  CHECK(failed_with("only one part") == "only one part");
  // Caught as the standard base class too, with the same message.
  try {
    ftopt::fail("as runtime_error: ", 1);
    FAIL("fail() returned");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "as runtime_error: 1");
  }
}

TEST_CASE("check: throws the parts when false, formats nothing when true", "[error]") {
  int writes = 0;
  ftopt::check(true, "never thrown: ", Counted{&writes});
  CHECK(writes == 0);  // the parts are formatted on failure only
  try {
    ftopt::check(2 > 3, "r must be > 0, got ", 0, ", ", Counted{&writes});
    FAIL("check(false) returned");
  } catch (const ftopt::Error& e) {
    CHECK(std::string(e.what()) == "r must be > 0, got 0, counted");
  }
  CHECK(writes == 1);
  // The names ftopt's own headers call are the same functions.
  CHECK_THROWS_AS(ftopt::detail::check(false, "x"), ftopt::Error);
  CHECK_THROWS_WITH(ftopt::detail::fail("y", 2), "y2");
}
