#!/usr/bin/env bash
# Runs one study's missing runs, then regenerates its RESULTS.md and plots.
#
#   bash experiments/run_study.sh STUDY [args for `softattn.sweep run`...]
#
# Environment: PARTS (space-separated `part=` values of the study's sweep.py;
# an entry DIR@ARGS runs `sweep.py:ARGS` into WORKDIR/DIR instead; empty: the
# sweep has no parts), WORKDIR (default workdirs/STUDY), OUT (where
# RESULTS.md and the PNGs go; default experiments/STUDY), REPORT_ARGS (extra
# report.py flags). Each study's run.sh calls this with its own PARTS.
set -euo pipefail
cd "$(dirname "$0")/.."
STUDY="$1"; shift
WORKDIR="${WORKDIR:-workdirs/$STUDY}"
OUT="${OUT:-experiments/$STUDY}"
python -m softattn.data prepare fashion_mnist
status=0
if [ -z "${PARTS:-}" ]; then
  python -m softattn.sweep run "experiments/$STUDY/sweep.py" \
    --workdir="$WORKDIR" "$@" || status=$?
else
  for part in $PARTS; do
    dir="${part%%@*}"; args="part=$part"
    [ "$dir" != "$part" ] && args="${part#*@}"
    python -m softattn.sweep run "experiments/$STUDY/sweep.py:$args" \
      --workdir="$WORKDIR/$dir" "$@" || status=$?
  done
fi
# Report whatever finished; unfinished runs show as missing seeds.
python "experiments/$STUDY/report.py" --workdir="$WORKDIR" --out="$OUT" \
  ${REPORT_ARGS:-}
exit "$status"
