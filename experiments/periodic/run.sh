#!/usr/bin/env bash
# The reduced-scale periodic study on Fashion-MNIST: the parts report.py's
# STUDY declares (sweep.py describes them), then runs.csv, RESULTS.md and
# the plots in experiments/periodic/ (or $OUT). FOCUS=focus / FOCUS=base:
# one set only. Measured on 2 CPU cores:
#   main              117 runs: ~61 minutes with --parallel=2
#   depth4_long       9 runs (1500 steps): ~15 minutes
#   breakdown_1ep     27 runs (1 epoch, 938 steps): 22 run-minutes; 21 in 9
#                     minutes with --parallel=2 (2026-11-24), the 6 of
#                     prenorm(cos_max) and prenorm(sin_max_constant) in 11
#                     minutes with --parallel=1 (2026-11-26)
#   breakdown_1ep_d4  27 declared: the 18 of the plain normalizers in 38
#                     minutes with --parallel=2 (2026-11-28), prenorm(cos_max)'s
#                     3 in 6 minutes with --parallel=1 (2026-11-29, `--only
#                     '*prenorm.cos_max*'`); the other norm versions' 6 are
#                     not run, see RESULTS.md
#   depth8            18 runs: 63 run-minutes, ~35 minutes with --parallel=2
#                     beside other jobs (2026-11-28)
#
#   bash experiments/periodic/run.sh                   # everything
#   bash experiments/periodic/run.sh --parallel=2      # args go to `sweep run`
#   WORKDIR=/tmp/x OUT=/tmp/x_out bash experiments/periodic/run.sh \
#       --set total_steps=3 --only '*seed-0'      # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
exec bash "$(dirname "$0")/../run_study.sh" periodic "$@"
