#!/usr/bin/env bash
# The GPU check: builds ftopt's tests and benchmarks against the LibTorch inside the pip torch
# wheel (a CUDA build), runs the tests and the benchmarks on CUDA, writes everything under $OUT,
# and prints a short table last. On a GPU the "CUDA: ..." tests run instead of skipping.
#
# Needs a CUDA machine (an NVIDIA GPU and its driver) with python3 and a CUDA build of torch 2.x
# from pip, CMake and g++. The header-only dependencies (range-v3, Boost.Hana, Catch2,
# nlohmann-json) and libjpeg-turbo's CMake package must be findable there; where the machine
# lacks them, bring a prefix holding them and point FTOPT_GPU_PREFIX at it. No network access is
# needed.
#
#   bash benchmarks/gpu/run.sh        (from the repository root; OUT defaults to ./gpu-out)
#   FTOPT_GPU_BUILD=DIR               the build folder (default: build-gpu)
set -euo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
build=${FTOPT_GPU_BUILD:-build-gpu}
torch_dir=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch
prefix_args=()
if [ -n "${FTOPT_GPU_PREFIX:-}" ]; then prefix_args=(-DCMAKE_PREFIX_PATH="$FTOPT_GPU_PREFIX"); fi

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$OUT/machine.txt" 2>&1

status() { printf '%-28s %s\n' "$1" "$2" >> "$OUT/summary.txt"; }
: > "$OUT/summary.txt"

# The same configure as scripts/setup.sh's default build, less the checks that need no GPU (the
# compile-fail cases, the installed package, the header check) and the Python peers (the GPU
# machine's Python has torch but not necessarily transformers and peft).
if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" \
     -DCaffe2_DIR="$(dirname "$torch_dir")/Caffe2" -DFTOPT_HEADER_CHECK=OFF -DFTOPT_COMPILE_CHECKS=OFF \
     -DFTOPT_PYTHON= "${prefix_args[@]}" > "$OUT/configure.log" 2>&1; then
  status configure ok
else
  status configure "FAILED (configure.log)"
fi
if cmake --build "$build" --parallel 16 --target all bench_trainer_overhead > "$OUT/build.log" 2>&1; then
  status build ok
else
  status build "FAILED (build.log)"
fi
if [ -x "$build/tests/ftopt_tests" ]; then
  if (cd "$build" && timeout 240 ctest --output-on-failure --parallel 8) \
       > "$OUT/ctest.log" 2>&1; then
    status tests "$(grep -E 'tests passed' "$OUT/ctest.log" | tail -1)"
  else
    status tests "FAILED: $(grep -E 'tests passed' "$OUT/ctest.log" | tail -1) (ctest.log)"
  fi
fi
if [ -x "$build/tests/ftopt_tests" ]; then
  # The CUDA-only paths: checkpointing's CUDA RNG, allocator peaks, pinned copies, Fp16Mixed,
  # and parallel::Ddp over NCCL on one GPU (the smoke test of the NCCL path).
  if timeout 120 "$build/tests/ftopt_tests" "[cuda],[fp16]" > "$OUT/cuda-tests.log" 2>&1; then
    status cuda-tests "$(tail -2 "$OUT/cuda-tests.log" | head -1)"
  else
    status cuda-tests "FAILED (cuda-tests.log)"
  fi
fi
if [ -x "$build/benchmarks/bench_trainer_overhead" ]; then
  FTOPT_DEVICE=cuda timeout 120 "$build/benchmarks/bench_trainer_overhead" \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    > "$OUT/bench_trainer_overhead.txt" 2>&1 || true
  grep _median "$OUT/bench_trainer_overhead.txt" | sed 's/^/  /' >> "$OUT/summary.txt" || true
fi
cat "$OUT/machine.txt"
cat "$OUT/summary.txt"
