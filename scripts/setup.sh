#!/usr/bin/env bash
# Installs what ftopt needs from Debian's packages (only what is missing; silent when all is
# there), then configures and builds. Sourced by scripts/run.sh and scripts/test.sh.
#   FTOPT_BUILD_DIR   build folder (default: build)
#   FTOPT_JOBS        parallel compile jobs (default: nproc; each needs ~1.8 GB)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${FTOPT_BUILD_DIR:-$root/build}
jobs=${FTOPT_JOBS:-$(nproc)}

# Why each package is here: docs/build.md.
packages=(
  g++ cmake make ccache pkg-config
  libtorch-dev             # LibTorch 1.13.1 (CPU)
  libopenblas0-openmp      # without it Debian's LibTorch falls back to reference BLAS (~50x slower)
  libgloo-dev              # c10d's Gloo backend (DDP on CPU)
  libboost-dev             # Boost.Hana
  librange-v3-dev          # the Pipeline's range adaptors
  zlib1g-dev               # gzipped IDX files
  nlohmann-json3-dev       # safetensors headers (JSON)
  libturbojpeg0-dev        # JPEG decoding
  catch2                   # tests (Catch2 v2)
  libbenchmark-dev         # benchmarks
  dataset-fashion-mnist    # the real data: /usr/share/datasets/fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed ]; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  echo "ftopt setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "ftopt setup: warning: libblas.so.3 is $blas, not OpenBLAS; LibTorch will be slow." \
          "Fix: update-alternatives --set libblas.so.3-x86_64-linux-gnu" \
          "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3" >&2 ;;
esac

if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
build() { cmake --build "$build_dir" --parallel "$jobs" "$@"; }
