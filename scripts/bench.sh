#!/usr/bin/env bash
# Runs benchmarks and files their JSON results under benchmarks/results/<machine>/ (the machine
# type from the CPU's flags: benchmarks/machine.hpp), then renders README.md's and docs/'s
# tables from the result files (scripts/report.py). Installs and builds what is missing first.
#
#   ./scripts/bench.sh                      # python_peer (the comparison with Python)
#   ./scripts/bench.sh python_peer peft     # any of build/benchmarks/bench_<name>
#   ./scripts/bench.sh finetune_text        # the main job, whole (build/apps/finetune --results)
#   ./scripts/bench.sh finetune_llm         # the LLM job, whole (build/apps/finetune --task llm --results)
#   FTOPT_BENCH_THREADS=2 (default) sets the threads of both sides; extra Google Benchmark
#   arguments go in FTOPT_BENCH_ARGS (e.g. --benchmark_filter=vit_bf16).
# A run that fails or stops half-way files nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
export FTOPT_BENCH_THREADS=${FTOPT_BENCH_THREADS:-2}
benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then benches=(python_peer); fi
# run_one NAME OUT: runs a benchmark, or one of the jobs (finetune_<task>: every CPU, as a user
# runs it), writing its JSON result to OUT.
run_one() {
  case "$1" in
    finetune_text) "$build_dir/apps/finetune" --results "$2" ;;
    finetune_llm) "$build_dir/apps/finetune" --task llm --results "$2" ;;
    # shellcheck disable=SC2086  # FTOPT_BENCH_ARGS is a list of arguments
    *) "$build_dir/benchmarks/bench_$1" --benchmark_out="$2" --benchmark_out_format=json ${FTOPT_BENCH_ARGS:-} ;;
  esac
}
for bench in "${benches[@]}"; do
  case "$bench" in
    finetune_*) build --target finetune >/dev/null ;;
    *) build --target "bench_$bench" >/dev/null ;;
  esac
done
for bench in "${benches[@]}"; do
  out=$(mktemp --suffix=.json)
  echo "== $bench ($FTOPT_BENCH_THREADS threads)"
  if ! run_one "$bench" "$out"; then
    rm -f "$out"
    echo "ftopt bench: $bench failed (its output is above); nothing filed" >&2
    exit 1
  fi
  python3 "$root/scripts/report.py" --store "$out"
  rm -f "$out"
done
python3 "$root/scripts/report.py"
