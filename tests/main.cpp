// Catch2 main: prints the seed and seeds LibTorch with it, so every failure can be replayed
// with --rng-seed <seed>. The default seed is fixed: runs repeat exactly unless asked otherwise.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include <torch/torch.h>

int main(int argc, char* argv[]) {
  Catch::Session session;
  session.configData().rngSeed = 20261130;
  if (int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  // A run that matches no test fails (Catch's -w NoTests), so a test that cannot be found cannot
  // pass: ctest runs each test by name, and CMake once split names at a ';' into two halves that
  // each matched nothing and "passed".
  // ctest runs each test by name and CMake's lists split a name at ';': both halves would match
  // nothing. A name with one stops every run, listing included, with the name.
  for (const auto& test : Catch::getAllTestCasesSorted(session.config()))
    if (test.name.find(';') != std::string::npos) {
      std::cerr << "ftopt tests: the test name \"" << test.name << "\" has a ';', which ctest would split; use a comma\n";
      return 2;
    }
  auto& config = session.configData();
  config.warnings = static_cast<Catch::WarnAbout::What>(config.warnings | Catch::WarnAbout::NoTests);
  const auto seed = config.rngSeed;
  // Not when listing: ctest's discovery reads every line of --list-test-names-only as a test.
  if (!config.listTests && !config.listTestNamesOnly && !config.listTags && !config.listReporters)
    std::cout << "ftopt tests: seed " << seed << " (replay with --rng-seed " << seed << ")\n";
  torch::manual_seed(seed);
  return session.run();
}
