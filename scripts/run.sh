#!/usr/bin/env bash
# The first command: install what is missing, build, and run the main job: pretrain a backbone on
# Fashion-MNIST classes 0-4 (cached in ~/.cache/ftopt; a ViT unless --model resnet), fine-tune it
# on classes 5-9 as the naive baseline and with ftopt's policies, with a progress bar and a
# closing comparison table. Arguments go to the job (--help lists them with their defaults).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
build --target finetune >/dev/null
"$build_dir/apps/finetune" "$@"
