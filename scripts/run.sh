#!/usr/bin/env bash
# The first command: install what is missing, build, and run the main job (fine-tuning on
# Fashion-MNIST with a progress bar and a closing comparison table). Arguments go to the job.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
build --target fashion_mnist >/dev/null
"$build_dir/examples/fashion_mnist" "$@"
