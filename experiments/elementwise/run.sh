#!/usr/bin/env bash
# The reduced-scale element-wise attention study (experiments/elementwise/
# sweep.py) on Fashion-MNIST: models A-H, single head and no-skip, the
# separate-optimizer runs (1 epoch x 2 seeds each; 29 minutes on 2 CPU cores
# with --parallel=2), then the paper's 10 epochs x 2 seeds for the claims one
# epoch cannot settle (A, C and B; B without skip on separate optimizers;
# 53 minutes with --parallel=2, 97 CPU-minutes), and the VGG control only
# with CONTROL=1 (+42 min alone, ~12 GB). Then RESULTS.md and the plots in experiments/elementwise/ (or $OUT).
#
#   bash experiments/elementwise/run.sh --parallel=2      # what RESULTS.md ran
#   bash experiments/elementwise/run.sh                   # one run at a time
#   WORKDIR=/tmp/ew OUT=/tmp/ew_out bash experiments/elementwise/run.sh \
#       --set num_epochs=0.1 --only '*seed-0'             # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
# DIR@ARGS: the 10-epoch subsets (report.py's LONG_PARTS reads them back).
PARTS="models separate"
PARTS="$PARTS models_10ep@part=models,epochs=10,variants=ABC,extras=false"
PARTS="$PARTS separate_10ep@part=separate,epochs=10,skips=noskip"
# The VGG control costs 70 CPU-minutes per epoch here (see sweep.py): opt in.
[ "${CONTROL:-0}" = 1 ] && PARTS="$PARTS control"
PARTS="$PARTS" exec bash "$(dirname "$0")/../run_study.sh" elementwise "$@"
