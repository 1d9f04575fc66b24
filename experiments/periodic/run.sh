#!/usr/bin/env bash
# The reduced-scale periodic study (experiments/periodic/sweep.py):
# LeViT demo at depth 1/2/4, periodic normalizers and their prenorm versions, break-downs, on Fashion-MNIST; 49 minutes on 2 CPU
# cores with --parallel=2 (what RESULTS.md ran). Then RESULTS.md and
# the plots in experiments/periodic/ (or $OUT).
#
#   bash experiments/periodic/run.sh                   # everything
#   bash experiments/periodic/run.sh --parallel=2      # args go to `sweep run`
#   WORKDIR=/tmp/x OUT=/tmp/x_out bash experiments/periodic/run.sh \
#       --set total_steps=3 --only '*seed-0'      # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
exec bash "$(dirname "$0")/../run_study.sh" periodic "$@"
