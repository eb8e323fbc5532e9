#pragma once
// test::fuzz: the one harness of the file readers' fuzz tests (tests/fuzz/readers.cpp). From the
// bytes of a good file it makes bad ones: the good bytes cut short at many lengths, and N mutated
// copies (1 to 4 edits each: a byte overwritten with a random byte, 0x00 or 0xFF, a byte deleted,
// a byte inserted; half of the edits in the first `header` bytes, where a format keeps its counts,
// lengths and offsets). Every attempt must read or throw ftopt::Error: another exception fails
// the test with the attempt that raised it, and a crash or a sanitizer report ends the run (the
// asan.fuzz build, tests/CMakeLists.txt, where what would read past a buffer without faulting
// here is caught).
//
// A `read` calls the reader outside any REQUIRE (which would take its ftopt::Error for a
// failure) and REQUIREs only what it got.
//
// N is FTOPT_FUZZ_MUTATIONS, else 300 (the unit run; asan.fuzz sets 2000). The draws come from
// Catch's seed, which main prints: `--rng-seed <seed>` and the same N repeat a run. A file that
// crashed a reader taking a path is left in the test's scratch folder (/tmp/ftopt-fuzz-*).
//
//   const auto outcome = test::fuzz::run(good, test::fuzz::through_file(dir.path / "x.gguf",
//       [](const std::filesystem::path& p) { weights::Gguf file(p); }), {.header = 256});
//   CHECK(outcome.read > 0);
//   CHECK(outcome.refused > 0);

// <torch/torch.h> before Catch: LibTorch defines a CHECK macro of its own that Catch's must
// replace (the sanitizer build has no precompiled header to order them).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include <ftopt/error.hpp>

namespace ftopt::test::fuzz {

/// N, the mutated copies of each run: FTOPT_FUZZ_MUTATIONS, else 300 (a few seconds for every
/// reader in the unit run).
inline int mutations() {
  const char* text = std::getenv("FTOPT_FUZZ_MUTATIONS");
  if (text == nullptr || *text == '\0') return 300;
  int n = 0;
  const char* end = text + std::strlen(text);
  const auto [stop, error] = std::from_chars(text, end, n);
  if (error != std::errc() || stop != end || n < 1)
    FAIL("FTOPT_FUZZ_MUTATIONS must be an integer >= 1, got '" << text << "'");
  return n;
}

struct Options {
  /// The first bytes, where the format keeps its counts, lengths and offsets: half of the edits
  /// land there, and the good bytes are cut at every length up to here (at least 1024).
  std::size_t header = 256;
  /// Bytes that mean something to a text format (quotes, brackets, separators): when set, half
  /// of the bytes an edit writes come from here, so that more mutations get past the parser.
  std::string alphabet;
  /// Mutated copies.
  int mutations = fuzz::mutations();
};

struct Outcome {
  int read = 0;     ///< attempts that read
  int refused = 0;  ///< attempts refused with an ftopt::Error
  int escaped = 0;  ///< attempts that threw anything else (each one also fails the test)
};

/// Reads `bytes`: returns when they read, throws ftopt::Error when it refuses them.
using Read = std::function<void(const std::string& bytes)>;

/// A Read for a reader that takes a path: writes the bytes to `path`, then calls read(path).
inline Read through_file(std::filesystem::path path, std::function<void(const std::filesystem::path&)> read) {
  return [path = std::move(path), read = std::move(read)](const std::string& bytes) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out) FAIL("test::fuzz: cannot write " << path.string());
    }
    read(path);
  };
}

namespace detail {
/// The type of the exception being handled, demangled.
inline std::string current_exception_type() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "an unknown type";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(type->name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(type->name());
}

inline std::string hex(unsigned char byte) {
  static constexpr char digits[] = "0123456789abcdef";
  return {'0', 'x', digits[byte >> 4], digits[byte & 0xF]};
}
} // namespace detail

/// Feeds `read` the good bytes first (they must read: else the test would test nothing), then
/// the good bytes cut short and `options.mutations` mutated copies; returns what became of them.
inline Outcome run(const std::string& good, const Read& read, const Options& options = {}) {
  try {
    read(good);
  } catch (const std::exception& e) {
    FAIL("test::fuzz: the good " << good.size() << " bytes do not read (" << detail::current_exception_type()
                                 << ": " << e.what() << "), so their mutations would test nothing");
  }
  Outcome outcome;
  constexpr int reported = 10;  // escapes reported one by one; the count says how many more
  auto attempt = [&](const std::string& bytes, const std::string& what) {
    INFO("test::fuzz: " << what << " (seed " << Catch::rngSeed() << ")");  // printed with a failure inside `read`
    try {
      read(bytes);
      ++outcome.read;
    } catch (const ftopt::Error&) {
      ++outcome.refused;
    } catch (const Catch::TestFailureException&) {
      throw;  // a REQUIRE inside `read` failed: Catch has reported it
    } catch (const std::exception& e) {
      if (++outcome.escaped <= reported)
        FAIL_CHECK("not an ftopt::Error: " << detail::current_exception_type() << ": " << e.what());
    } catch (...) {
      if (++outcome.escaped <= reported) FAIL_CHECK("not an ftopt::Error: " << detail::current_exception_type());
    }
  };

  // Cut short: at every length through the header (at least the first 1024 bytes), then at
  // about 512 lengths spread over the rest.
  const std::size_t every = std::max<std::size_t>(options.header, 1024);
  const std::size_t stride = good.size() > every ? std::max<std::size_t>(1, (good.size() - every) / 512) : 1;
  for (std::size_t n = 0; n < good.size(); n += n < every ? 1 : stride)
    attempt(good.substr(0, n), "the good bytes cut to " + std::to_string(n) + " of " + std::to_string(good.size()));

  std::mt19937_64 rng(Catch::rngSeed());
  auto byte = [&]() -> unsigned char {
    if (!options.alphabet.empty() && rng() % 2 == 0)
      return static_cast<unsigned char>(options.alphabet[rng() % options.alphabet.size()]);
    return static_cast<unsigned char>(rng());
  };
  for (int m = 0; m < options.mutations; ++m) {
    std::string bytes = good;
    std::string what = "mutation " + std::to_string(m) + " of " + std::to_string(options.mutations) + ":";
    for (int edit = 0, edits = 1 + static_cast<int>(rng() % 4); edit < edits; ++edit) {
      const std::size_t span = rng() % 2 == 0 ? std::min(options.header, bytes.size()) : bytes.size();
      const std::size_t at = span == 0 ? 0 : static_cast<std::size_t>(rng() % span);
      const auto kind = bytes.empty() ? 4 : rng() % 5;
      const std::string where = " byte " + std::to_string(at);
      if (kind == 3) {
        what += where + " deleted";
        bytes.erase(at, 1);
      } else if (kind == 4) {
        const unsigned char b = byte();
        what += " " + detail::hex(b) + " inserted at" + where;
        bytes.insert(at, 1, static_cast<char>(b));
      } else {
        const unsigned char b = kind == 0 ? byte() : kind == 1 ? 0x00 : 0xFF;
        what += where + " := " + detail::hex(b);
        bytes[at] = static_cast<char>(b);
      }
      if (edit + 1 < edits) what += ",";
    }
    attempt(bytes, what);
  }
  CHECK(outcome.escaped == 0);
  return outcome;
}

} // namespace ftopt::test::fuzz
