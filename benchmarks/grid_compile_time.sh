#!/usr/bin/env bash
# Compile time of a grid against its size, the way Boost.Hana benchmarks its compile times:
# benchmarks/grid_compile_time.cpp instantiated for N of the main grid's 24 valid combinations,
# compiled (-O0, one translation unit, no precompiled header) and timed for each N. The slope is
# what one more combination costs; N = 0 is the headers alone.
#
#   benchmarks/grid_compile_time.sh [N ...]        (default: 0 6 12 24)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cxx="${CXX:-c++}"
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(0 6 12 24)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
flags=(-std=c++20 -O0 -c -D_GLIBCXX_USE_CXX11_ABI=1 -I"$root/include" -isystem /usr/include/torch/csrc/api/include
       -idirafter "$root/include/ftopt/parallel/shim")
echo "| combinations | compile seconds | per combination above N = 0 |"
echo "|---|---|---|"
base=""
for n in "${sizes[@]}"; do
  start=$(date +%s.%N)
  "$cxx" "${flags[@]}" -DFTOPT_GRID_N="$n" "$root/benchmarks/grid_compile_time.cpp" -o "$out/grid.o"
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  [[ -n "$base" ]] || base=$seconds
  if [[ "$n" -gt 0 ]]; then per=$(awk -v s="$seconds" -v b="$base" -v n="$n" 'BEGIN { printf "%.1f", (s - b) / n }')
  else per="-"; fi
  printf "| %s | %s | %s |\n" "$n" "$seconds" "$per"
done
