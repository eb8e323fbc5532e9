#!/usr/bin/env bash
# The set-up's bad input (scripts/python_env.sh), each in a scratch folder: a venv whose Python
# does not start, then a pin that cannot be found (the venv is made anew, pip fails, no
# completion marker is left); a completed venv whose torch has no CMake files. Prints what the
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
