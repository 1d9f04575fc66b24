#!/usr/bin/env bash
# The reduced-scale relu_attention study (experiments/relu_attention/sweep.py):
# alpha x h grid at two ViT sizes, qk-LN and gate ablations, 10-shot probe, on Fashion-MNIST; an estimated 1-1.5 hours on 2 CPU
# cores (not measured yet). Then RESULTS.md and
# the plots in experiments/relu_attention/ (or $OUT).
#
#   bash experiments/relu_attention/run.sh                   # everything
#   bash experiments/relu_attention/run.sh --parallel=2      # args go to `sweep run`
#   WORKDIR=/tmp/x OUT=/tmp/x_out bash experiments/relu_attention/run.sh \
#       --set total_steps=3 --only '*seed-0'      # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
cd "$(dirname "$0")/../.."
STUDY=relu_attention
WORKDIR="${WORKDIR:-workdirs/$STUDY}"
OUT="${OUT:-experiments/$STUDY}"
python -m softattn.data prepare fashion_mnist
status=0
python -m softattn.sweep run "experiments/$STUDY/sweep.py" \
  --workdir="$WORKDIR" "$@" || status=$?
# Report whatever finished; unfinished runs show as missing seeds.
python "experiments/$STUDY/report.py" --workdir="$WORKDIR" --out="$OUT" \
  ${REPORT_ARGS:-}
exit "$status"
