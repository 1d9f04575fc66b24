#!/usr/bin/env bash
# The reduced-scale scaling demo (configs/sweeps/scaling_fmnist.py): 5 ViT
# sizes x 3 normalizers on Fashion-MNIST, ~1 hour on 2 CPU cores. Writes
# experiments/scaling/results/{results.md,results.csv,fits.json,scaling.png}.
#
#   bash experiments/scaling/run.sh                 # everything, one run at a time
#   bash experiments/scaling/run.sh --parallel=2    # extra args go to `sweep run`
#
# Interrupt it at will: rerunning skips finished runs and resumes the rest
# from their checkpoints. WORKDIR (default workdirs/scaling_fmnist) holds the runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORKDIR="${WORKDIR:-workdirs/scaling_fmnist}"
python -m softattn.data prepare fashion_mnist
status=0
python -m softattn.sweep run configs/sweeps/scaling_fmnist.py \
  --workdir="$WORKDIR" "$@" || status=$?
# Report whatever finished; failed runs are listed with their reasons.
python -m softattn.sweep report "$WORKDIR" --out=experiments/scaling/results
exit "$status"
