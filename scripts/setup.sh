#!/usr/bin/env bash
# Installs what ftopt needs (Debian's packages that are missing; the Python venv with the pinned
# torch wheel and peers, once per machine), then configures the build. Sourced by scripts/run.sh
# and scripts/test.sh; silent when everything is there.
#   FTOPT_TORCH       pip (default): LibTorch 2.x from the venv's torch wheel (a CUDA build);
#                     debian: Debian's LibTorch 1.13 (CPU), the second supported build
#   FTOPT_BUILD_DIR   build folder (default: build for pip, build-1.13 for debian)
#   FTOPT_JOBS        parallel compile jobs (default: nproc; each needs ~2 GB)
#   FTOPT_VENV_ROOT   where the venv lives (default: ~/.cache/ftopt)
# After sourcing: $root, $build_dir, $jobs, $venv_python, $data_dir (exported as FTOPT_DATA_DIR),
# and build() (cmake --build).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
torch_flavour=${FTOPT_TORCH:-pip}
jobs=${FTOPT_JOBS:-$(nproc)}

# Why each package is here: docs/build.md.
packages=(
  g++ cmake make ccache pkg-config
  python3 python3-venv     # the venv (a machine whose python3 is not Debian's uses its own)
  libtorch-dev             # LibTorch 1.13.1 (CPU): the second supported build
  libopenblas0-openmp      # without it Debian's LibTorch falls back to reference BLAS (far slower)
  libgloo-dev              # c10d's Gloo backend (DDP on CPU) for Debian's LibTorch
  libboost-dev             # Boost.Hana
  librange-v3-dev          # the Pipeline's range adaptors
  zlib1g-dev               # gzipped IDX files
  nlohmann-json3-dev       # safetensors headers (JSON)
  libturbojpeg0-dev        # JPEG decoding
  catch2                   # tests (Catch2 v2)
  libbenchmark-dev         # benchmarks
  libcli11-dev             # apps/finetune's command line
  libicu-dev               # ICU: Unicode categories, ages, NFD and case for the tokenizers
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
  if ! { $sudo apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
           "${missing[@]}" >/dev/null; }; then
    echo "ftopt setup: apt-get could not install ${missing[*]} (its message is above)." \
         "Fix: run 'apt-get update && apt-get install ${missing[*]}' as root, then rerun." >&2
    exit 1
  fi
fi

blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "ftopt setup: warning: libblas.so.3 is $blas, not OpenBLAS; Debian's LibTorch will be slow." \
          "Fix: update-alternatives --set libblas.so.3-x86_64-linux-gnu" \
          "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3" >&2 ;;
esac

source "$root/scripts/python_env.sh"
ftopt_python_env "$root" || exit 1
ftopt_data_env "$root" || exit 1

# configure_build DIR FLAVOUR [cmake args...]: configures once (again when the flavour's LibTorch
# moved, e.g. a new venv after a change of pins).
configure_build() {
  local dir=$1 flavour=$2
  shift 2
  local args=(-DCMAKE_BUILD_TYPE=Release -DFTOPT_PYTHON="$venv_python" -DFTOPT_DATA_DIR="$data_dir")
  case "$flavour" in
    # Caffe2_DIR too: CMake's search would otherwise find Debian's Caffe2 config first.
    pip) args+=(-DTorch_DIR="$torch_cmake_dir" -DCaffe2_DIR="$(dirname "$torch_cmake_dir")/Caffe2") ;;
    debian) args+=(-DTorch_DIR=/usr/lib/x86_64-linux-gnu/cmake/Torch) ;;
    *) echo "ftopt setup: FTOPT_TORCH must be pip or debian, got '$flavour'" >&2; exit 1 ;;
  esac
  local want="${args[*]} $*"
  if [ ! -f "$dir/CMakeCache.txt" ] || [ "$(cat "$dir/.ftopt-configure" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$dir"
    if ! cmake -S "$root" -B "$dir" "${args[@]}" "$@" > "$dir/configure.log" 2>&1; then
      tail -40 "$dir/configure.log" >&2
      echo "ftopt setup: configuring $dir ($flavour LibTorch) failed; the end of $dir/configure.log is above" >&2
      exit 1
    fi
    echo "$want" > "$dir/.ftopt-configure"
  fi
}

case "$torch_flavour" in
  pip) build_dir=${FTOPT_BUILD_DIR:-$root/build} ;;
  *) build_dir=${FTOPT_BUILD_DIR:-$root/build-1.13} ;;
esac
configure_build "$build_dir" "$torch_flavour"
build() { cmake --build "$build_dir" --parallel "$jobs" "$@"; }
