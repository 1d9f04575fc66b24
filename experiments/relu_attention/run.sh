#!/usr/bin/env bash
# The reduced-scale relu_attention study (experiments/relu_attention/sweep.py;
# parts declared in report.py's STUDY) on Fashion-MNIST, timed by hand on 2
# CPU cores (runs.csv records per-run wall_s, not elapsed time): part
# `main`, the alpha x h grid at two ViT sizes, qk-LN and gate ablations,
# 10-shot probe (161 runs: 118 in 96 run-minutes, ~52 minutes elapsed with
# --parallel=2; the 23 relu6 / relu2-ablation runs: 20 in 22 run-minutes,
# ~29 minutes with --parallel=1 beside other jobs, 3 in 4 run-minutes with
# --parallel=2; the 20 alpha-0.5 seed-1/2 runs of the other activations: 26
# run-minutes, ~14 minutes with --parallel=2 beside other jobs, 2026-11-28);
# focus part `medium_1000`: the medium model at 1000 steps x 3 seeds (21
# runs, 63 run-minutes: ~35 minutes); focus part `speed_relu6`: relu/n and
# relu6/n at alpha 1 on both sizes x 3 seeds, alternating, for the speed
# claim (12 runs, 19 run-minutes, ~12 minutes with --parallel=2 beside
# other jobs, 2026-11-28). Then runs.csv, RESULTS.md and the plots in
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
