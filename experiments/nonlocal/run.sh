#!/usr/bin/env bash
# The reduced-scale scaled non-local study (experiments/nonlocal/sweep.py):
# part `main`, 17 settings x 3 seeds on Fashion-MNIST (55 run-minutes of
# wall time, ~36 minutes on 2 CPU cores with --parallel=2), and the focus
# parts `init_1ep` (NL vs scaled NL x He vs sigma 0.01 at 4 heads, 4 seeds x
# ~1 epoch: 37 run-minutes, ~20 minutes) and `paper_defaults` (the paper's
# setting where `main` differs: scaled NL with He, Tables 1-2 at 1 head;
# 27 runs, 20 run-minutes, ~10 minutes; all measured 2026-11-23/24) and
# `unscaled` (Sec. 3.1's block without the scaling factor, 4 heads, He,
# 3 seeds x 300 steps: 5 run-minutes, measured 2026-11-24) and
# `unscaled_32px` (the same on 32x32 inputs, the paper's 16x16 stage-2
# maps: 10 run-minutes, measured 2026-11-26) and
# `embed_reduction` (Fig. 2: NL and scaled NL embedding to 8 of 32
# channels, 4 heads, 3 seeds x 300 steps: 11 run-minutes, measured
# 2026-11-26 at --parallel=1 beside another study's runs) and
# `timing_32px` (Table 3's step times: NL and scaled NL at 1, 2, 4 heads on
# 32x32 inputs, 3 seeds x 30 steps, alternating: 18 runs, 26 minutes at
# --parallel=1 with nothing beside it, measured 2026-11-28; run it that
# way, as its step times are the measurement); then
# runs.csv, RESULTS.md and the plots in experiments/nonlocal/ (or $OUT).
# FOCUS=focus runs only the focus parts, FOCUS=base only `main`.
#
#   bash experiments/nonlocal/run.sh                        # everything
#   bash experiments/nonlocal/run.sh --parallel=2           # args go to `sweep run`
#   WORKDIR=/tmp/nl OUT=/tmp/nl_out bash experiments/nonlocal/run.sh \
#       --set total_steps=3 --only '*seed-0'                # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
exec bash "$(dirname "$0")/../run_study.sh" nonlocal "$@"
