#!/usr/bin/env bash
# The reduced-scale scaled non-local study (experiments/nonlocal/sweep.py):
# 17 settings x 3 seeds on Fashion-MNIST, an estimated 1-1.5 hours on 2 CPU
# cores (not measured yet), then
# RESULTS.md and the plots in experiments/nonlocal/ (or $OUT).
#
#   bash experiments/nonlocal/run.sh                        # everything
#   bash experiments/nonlocal/run.sh --parallel=2           # args go to `sweep run`
#   WORKDIR=/tmp/nl OUT=/tmp/nl_out bash experiments/nonlocal/run.sh \
#       --set total_steps=3 --only '*seed-0'                # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
cd "$(dirname "$0")/../.."
STUDY=nonlocal
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
