#!/usr/bin/env bash
# The reduced-scale element-wise attention study (experiments/elementwise/
# sweep.py): models A-H, single head and no-skip (x3 seeds), the
# separate-optimizer runs, on Fashion-MNIST (the VGG control only with
# CONTROL=1: ~10 CPU-hours); an estimated 1-1.5
# hours on 2 CPU cores (not measured yet). Then RESULTS.md and the plots in experiments/elementwise/
# (or $OUT).
#
#   bash experiments/elementwise/run.sh                   # everything
#   bash experiments/elementwise/run.sh --parallel=2      # args go to `sweep run`
#   WORKDIR=/tmp/ew OUT=/tmp/ew_out bash experiments/elementwise/run.sh \
#       --set num_epochs=0.1 --only '*seed-0'             # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
cd "$(dirname "$0")/../.."
STUDY=elementwise
WORKDIR="${WORKDIR:-workdirs/$STUDY}"
OUT="${OUT:-experiments/$STUDY}"
python -m softattn.data prepare fashion_mnist
status=0
parts="models separate"
# The VGG control costs ~10 CPU-hours here (see sweep.py): opt in.
[ "${CONTROL:-0}" = 1 ] && parts="$parts control"
for part in $parts; do
  python -m softattn.sweep run "experiments/$STUDY/sweep.py:part=$part" \
    --workdir="$WORKDIR/$part" "$@" || status=$?
done
# Report whatever finished; unfinished runs show as missing seeds.
python "experiments/$STUDY/report.py" --workdir="$WORKDIR" --out="$OUT" \
  ${REPORT_ARGS:-}
exit "$status"
