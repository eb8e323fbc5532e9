#!/usr/bin/env bash
# The second command: install what is missing, build everything, and run the whole test suite
# (unit tests, compile-fail checks, header self-containment, the installed-package consumer).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
build
cd "$build_dir"
ctest --output-on-failure --parallel "$jobs"
