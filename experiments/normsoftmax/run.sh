#!/usr/bin/env bash
# The reduced-scale NormSoftmax study (experiments/normsoftmax/sweep.py):
# ViT softmax vs NSM at 3 budgets, without weight decay, the variants, and
# the NSM cross-entropy on a PreResNet-20, on Fashion-MNIST; an estimated 1-1.5
# hours on 2 CPU cores (not measured yet). Then RESULTS.md and the plots in experiments/normsoftmax/
# (or $OUT).
#
#   bash experiments/normsoftmax/run.sh                   # everything
#   bash experiments/normsoftmax/run.sh --parallel=2      # args go to `sweep run`
#   WORKDIR=/tmp/nsm OUT=/tmp/nsm_out bash experiments/normsoftmax/run.sh \
#       --only '*total_steps-50__*seed-0'                 # smoke test
# (the attention part sweeps total_steps itself, so --set cannot shorten
# it; the loss part's runs do not match and are skipped with an error line)
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
cd "$(dirname "$0")/../.."
STUDY=normsoftmax
WORKDIR="${WORKDIR:-workdirs/$STUDY}"
OUT="${OUT:-experiments/$STUDY}"
python -m softattn.data prepare fashion_mnist
status=0
for part in attention loss loss_softmax; do
  python -m softattn.sweep run "experiments/$STUDY/sweep.py:part=$part" \
    --workdir="$WORKDIR/$part" "$@" || status=$?
done
# Report whatever finished; unfinished runs show as missing seeds.
python "experiments/$STUDY/report.py" --workdir="$WORKDIR" --out="$OUT" \
  ${REPORT_ARGS:-}
exit "$status"
