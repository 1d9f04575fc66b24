#!/usr/bin/env bash
# The reduced-scale periodic study (experiments/periodic/sweep.py):
# part `main`: LeViT demo at depth 1/2/4, periodic normalizers and their
# prenorm versions, break-downs, on Fashion-MNIST (117 runs, about 61 minutes
# on 2 CPU cores with --parallel=2, measured); focus part `depth4_long`:
# softmax, sin_softmax, sin2_max_shifted at depth 4 for 1500 steps x 3 seeds
# (9 runs, about 15 minutes, measured); focus part `breakdown_1ep`: the
# break-down and stability claims at depth 1 for 1 epoch (938 steps) x 3
# seeds (27 runs, 22 run-minutes; measured: 21 runs in 9 minutes with
# --parallel=2 on 2026-11-24, the 6 prenorm(cos_max) and
# prenorm(sin_max_constant) runs in 11 minutes with --parallel=1 on
# 2026-11-26); focus part `breakdown_1ep_d4`: the same at depth 4 (27
# declared; the 12 runs of sin_max_constant, cos_max, sin2_max, siren_max,
# softmax, sin_softmax ran in 38 minutes with --parallel=2, measured
# 2026-11-28; prenorm(cos_max)'s 3 ran in 6 minutes with --parallel=1 on
# 2026-11-29 (`--only '*prenorm.cos_max*'`); the other norm versions' 12
# are not run, see RESULTS.md); focus part `depth8`: Table 2's pairs (softmax,
# sin2_max_shifted, sin_softmax and their norm versions) at depth 8 for the
# `main` 300 steps x 3 seeds (18 runs, 63 run-minutes, ~35 minutes with
# --parallel=2 beside other jobs, measured 2026-11-28). Then runs.csv,
# RESULTS.md and the plots in
# experiments/periodic/ (or $OUT). FOCUS=focus / FOCUS=base: one set only.
#
#   bash experiments/periodic/run.sh                   # everything
#   bash experiments/periodic/run.sh --parallel=2      # args go to `sweep run`
#   WORKDIR=/tmp/x OUT=/tmp/x_out bash experiments/periodic/run.sh \
#       --set total_steps=3 --only '*seed-0'      # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
exec bash "$(dirname "$0")/../run_study.sh" periodic "$@"
