#!/usr/bin/env bash
# The reduced-scale relu_attention study (experiments/relu_attention/sweep.py):
# part `main`: alpha x h grid at two ViT sizes (3 seeds for softmax,
# relu / identity at alpha 0, 0.5, 1 and every activation at alpha 1), qk-LN
# and gate ablations, 10-shot probe, on Fashion-MNIST (141 runs: 118 in 96
# run-minutes, ~52 minutes elapsed on 2 CPU cores with --parallel=2, and
# 20 of the 23 relu6 / relu2-ablation runs in 22 run-minutes, ~29 minutes
# with --parallel=1 beside other jobs; measured by hand: runs.csv records
# per-run wall_s, not elapsed time);
# focus part `medium_1000`: the medium model at 1000 steps x 3 seeds (21
# runs, 63 run-minutes: ~35 minutes, measured). Then runs.csv, RESULTS.md and the plots in
# experiments/relu_attention/ (or $OUT). FOCUS=focus / base: one set only.
#
#   bash experiments/relu_attention/run.sh                   # everything
#   bash experiments/relu_attention/run.sh --parallel=2      # args go to `sweep run`
#   WORKDIR=/tmp/x OUT=/tmp/x_out bash experiments/relu_attention/run.sh \
#       --set total_steps=3 --only '*seed-0'      # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
exec bash "$(dirname "$0")/../run_study.sh" relu_attention "$@"
