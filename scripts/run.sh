#!/usr/bin/env bash
# The first command: install what is missing (Debian's packages; the venv and the data folder of
# real weights and text, once per machine), build, and run the main job: fine-tune
# all-MiniLM-L6-v2, a pretrained BERT, on the BBC News articles as the naive baseline and with
# ftopt's policies, with a progress bar and a closing comparison table (--task fashion-mnist: the
# image job). Arguments go to the job (--help lists them with their defaults).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
build --target finetune >/dev/null
"$build_dir/apps/finetune" "$@"
