#!/usr/bin/env bash
# Runs one study's missing runs (all its parts from one pool of --parallel
# slots), then exports runs.csv and regenerates RESULTS.md and the plots
# from it.
#
#   bash experiments/run_study.sh STUDY [args for `softattn.sweep run`...]
#
# The parts (DIR@ARGS: `sweep.py:ARGS` into WORKDIR/DIR) come from the
# study's report.py (`--print-parts`), the one place that declares them.
# Environment: FOCUS (`all`, default: the base parts and the focus parts
# that spend extra CPU on claims more seeds or a longer budget can settle;
# `base` or `focus`: only those), WORKDIR (default workdirs/STUDY), OUT
# (where runs.csv, RESULTS.md and the PNGs go; default experiments/STUDY),
# OPTIONAL=1 (also the study's opt-in parts, e.g. the element-wise control),
# REPORT_ARGS (extra report.py flags, e.g. --no_probes).
set -euo pipefail
cd "$(dirname "$0")/.."
STUDY="$1"; shift
WORKDIR="${WORKDIR:-workdirs/$STUDY}"
OUT="${OUT:-experiments/$STUDY}"
python -m softattn.data prepare fashion_mnist
status=0
parts=$(python "experiments/$STUDY/report.py" --print-parts="${FOCUS:-all}")
[ "${OPTIONAL:-0}" = 1 ] && parts="$parts $(python "experiments/$STUDY/report.py" --print-parts=optional)"
# All parts in one runner: its --parallel slots are shared, so the tail of
# one part does not leave a core idle while the next part waits.
specs=(); dirs=()
for part in $parts; do
  dir="${part%%@*}"; args="${part#*@}"
  spec="experiments/$STUDY/sweep.py"
  [ -n "$args" ] && spec="$spec:$args"
  specs+=("$spec"); dirs+=("--workdir=$WORKDIR/$dir")
done
python -m softattn.sweep run "${specs[@]}" "${dirs[@]}" "$@" || status=$?
# Report whatever finished; unfinished runs show as missing seeds.
python "experiments/$STUDY/report.py" --workdir="$WORKDIR" --out="$OUT" \
  ${REPORT_ARGS:-}
exit "$status"
