#!/usr/bin/env bash
# What including <ftopt.hpp> costs a translation unit, against one including <torch/torch.h>:
# each TU holds only the include and an empty main, compiled with the build's own flags (those of
# build/examples' fashion_mnist: g++ -O3, no PCH), one compile at a time, the TUs in turn for
# ROUNDS rounds so that a slower moment of a noisy machine hits every TU alike. Then, once per TU,
# the memory g++ allocated for it (-ftime-report's TOTAL, its garbage-collected heap): the same
# on every run, so a change too small for the noisy seconds still shows there.
#
#   scripts/tu_cost.sh [ROUNDS] [INCLUDE_DIR...]
#
# Each INCLUDE_DIR (default: this checkout's include/) stands in for include/, so another
# version of the headers (`git archive REV include | tar -x -C DIR`) is measured beside this one.
# Run `source scripts/setup.sh && build` first (docs/build.md, "Compile time").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
shift || true
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=("$root/include")
flags="$root/build/examples/CMakeFiles/fashion_mnist.dir/flags.make"
[ -f "$flags" ] || { echo "tu_cost: $flags is missing; build first (source scripts/setup.sh && build)" >&2; exit 1; }
defines=$(grep '^CXX_DEFINES' "$flags" | cut -d= -f2-)
includes=$(grep '^CXX_INCLUDES' "$flags" | cut -d= -f2-)
cxxflags=$(grep '^CXX_FLAGS' "$flags" | cut -d= -f2-)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '#include <torch/torch.h>\nint main() {}\n' > "$work/torch.cpp"
printf '#include <ftopt.hpp>\nint main() {}\n' > "$work/ftopt.cpp"

seconds() {  # TU INCLUDE_DIR
  local own=${includes//$root\/include/$2} start end
  start=$(date +%s.%N)
  eval g++ $defines $own $cxxflags -c "$work/$1" -o "$work/out.o"
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

memory() {  # TU INCLUDE_DIR
  local own=${includes//$root\/include/$2}
  eval g++ $defines $own $cxxflags -fsyntax-only -ftime-report "$work/$1" 2>&1 | awk '/TOTAL/ {print $NF}'
}

for round in $(seq "$rounds"); do
  t=$(seconds torch.cpp "$root/include")
  printf 'round %s  %-50s %6.1f s\n' "$round" "<torch/torch.h>" "$t"
  for dir in "${dirs[@]}"; do
    f=$(seconds ftopt.cpp "$dir")
    printf 'round %s  %-50s %6.1f s  %.2fx\n' "$round" "<ftopt.hpp> from $dir" "$f" "$(echo "$f / $t" | bc -l)"
  done
done
t=$(memory torch.cpp "$root/include")
printf 'memory   %-50s %8s\n' "<torch/torch.h>" "$t"
for dir in "${dirs[@]}"; do
  printf 'memory   %-50s %8s\n' "<ftopt.hpp> from $dir" "$(memory ftopt.cpp "$dir")"
done
