#!/usr/bin/env bash
# The second command: install what is missing, then build and test both supported LibTorch builds:
#   build/       LibTorch 2.x from the pinned torch wheel (the default): every test, example, app,
#                benchmark compiled as a check (built whole by scripts/bench.sh), compile-fail check,
#                header self-containment, the sanitizer builds, the installed
#                package, and the peer tests against the real Python libraries;
#   build-1.13/  Debian's LibTorch 1.13 (CPU): the unit tests.
# A test may report "skipped" only where the machine lacks what it needs (the "CUDA: ..." tests
# without a GPU, the "AVX-512: ..." and "AVX2: ..." ones on a CPU without them); any other skip
# fails the run.
# Each phase's wall time is printed as it ends, and all of them at the end (also of a failed run),
# so that the cold run's budget stays visible.
set -euo pipefail
phase_start=$SECONDS
phase_times=()
# phase NAME: the phase that ran since the last call ends, under NAME.
phase() {
  local took=$((SECONDS - phase_start))
  phase_times+=("$(printf '%5d s  %s' "$took" "$1")")
  echo "== phase: $1: $took s"
  phase_start=$SECONDS
}
phase_report() {
  echo "== phase times (total $SECONDS s; the last unfinished: $((SECONDS - phase_start)) s):"
  printf '%s\n' "${phase_times[@]}"
}
trap phase_report EXIT
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
phase "installs and configure (LibTorch 2.x)"

# run_ctest DIR NAME: ctest in DIR; fails on a failed test and on a skip outside the CUDA tests.
run_ctest() {
  local dir=$1 name=$2 log status=0 units
  log=$(mktemp)
  echo "== ctest: $name ($dir)"
  # The unit tests are registered from the test program's own list; a list that failed to build
  # (a test name with a ';' stops it, with the name, above) leaves none, and ctest would pass.
  units=$(cd "$dir" && ctest -N -L unit | sed -n 's/^Total Tests: //p')
  if [ "${units:-0}" -lt 100 ]; then
    echo "ftopt test: only ${units:-0} unit tests are registered in $dir; the test list did not build (see above)" >&2
    rm -f "$log"
    return 1
  fi
  (cd "$dir" && ctest --output-on-failure --parallel "$jobs") 2>&1 | tee "$log" || status=$?
  local skipped
  # A copy of the CPU kernels this CPU cannot run (tests/isa.hpp) skips too.
  skipped=$(grep -E '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$log" | grep -vE '[0-9]+ - (CUDA|NCCL|AVX-512|AVX2)' || true)
  rm -f "$log"
  if [ -n "$skipped" ]; then
    echo "ftopt test: these tests skipped on a build where they must run:" >&2
    echo "$skipped" >&2
    status=1
  fi
  return $status
}

build
phase "build (LibTorch 2.x)"
run_ctest "$build_dir" "LibTorch 2.x (pip wheel)"
phase "ctest (LibTorch 2.x)"

# The second build re-tests what can differ between LibTorch versions: not the tests of text,
# JSON, schedules, reports and the like (FTOPT_VERSION_NEUTRAL_TESTS, tests/CMakeLists.txt).
configure_build "$root/build-1.13" debian -DFTOPT_PYTHON= -DFTOPT_BUILD_EXAMPLES=OFF -DFTOPT_BUILD_APPS=OFF \
  -DFTOPT_BUILD_BENCHMARKS=OFF -DFTOPT_HEADER_CHECK=OFF -DFTOPT_COMPILE_CHECKS=OFF -DFTOPT_VERSION_NEUTRAL_TESTS=OFF
cmake --build "$root/build-1.13" --parallel "$jobs"
phase "configure and build (LibTorch 1.13)"
run_ctest "$root/build-1.13" "LibTorch 1.13 (Debian)"
phase "ctest (LibTorch 1.13)"
