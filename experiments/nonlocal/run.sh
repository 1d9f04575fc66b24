#!/usr/bin/env bash
# The reduced-scale scaled non-local study (experiments/nonlocal/sweep.py):
# part `main`, 17 settings x 3 seeds on Fashion-MNIST (36 minutes on 2 CPU
# cores with --parallel=2, measured), and the focus part `init_1ep` (NL vs
# scaled NL x He vs sigma 0.01 at 4 heads, 4 seeds x ~1 epoch: ~40 minutes,
# estimated); then runs.csv, RESULTS.md and the plots in
# experiments/nonlocal/ (or $OUT). FOCUS=focus runs only the focus part,
# FOCUS=base only `main`.
#
#   bash experiments/nonlocal/run.sh                        # everything
#   bash experiments/nonlocal/run.sh --parallel=2           # args go to `sweep run`
#   WORKDIR=/tmp/nl OUT=/tmp/nl_out bash experiments/nonlocal/run.sh \
#       --set total_steps=3 --only '*seed-0'                # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
exec bash "$(dirname "$0")/../run_study.sh" nonlocal "$@"
