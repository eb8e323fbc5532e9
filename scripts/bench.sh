#!/usr/bin/env bash
# Runs benchmarks and files their JSON results under benchmarks/results/<machine>/ (the machine
# type from the CPU's flags: benchmarks/machine.hpp), then renders README.md's and docs/'s
# tables from the result files (scripts/report.py). Installs and builds what is missing first.
#
#   ./scripts/bench.sh                      # python_peer (the comparison with Python)
#   ./scripts/bench.sh python_peer peft     # any of build/benchmarks/bench_<name>
#   FTOPT_BENCH_THREADS=2 (default) sets the threads of both sides; extra Google Benchmark
#   arguments go in FTOPT_BENCH_ARGS (e.g. --benchmark_filter=vit_bf16).
# A run that fails or stops half-way files nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
export FTOPT_BENCH_THREADS=${FTOPT_BENCH_THREADS:-2}
benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then benches=(python_peer); fi
for bench in "${benches[@]}"; do
  build --target "bench_$bench" >/dev/null
done
for bench in "${benches[@]}"; do
  out=$(mktemp --suffix=.json)
  echo "== bench_$bench ($FTOPT_BENCH_THREADS threads)"
  # shellcheck disable=SC2086  # FTOPT_BENCH_ARGS is a list of arguments
  if ! "$build_dir/benchmarks/bench_$bench" --benchmark_out="$out" --benchmark_out_format=json \
       ${FTOPT_BENCH_ARGS:-}; then
    rm -f "$out"
    echo "ftopt bench: bench_$bench failed (its output is above); nothing filed" >&2
    exit 1
  fi
  python3 "$root/scripts/report.py" --store "$out"
  rm -f "$out"
done
python3 "$root/scripts/report.py"
