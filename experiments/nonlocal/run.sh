#!/usr/bin/env bash
# The reduced-scale scaled non-local study on Fashion-MNIST: the parts
# report.py's STUDY declares (sweep.py describes them), then runs.csv,
# RESULTS.md and the plots in experiments/nonlocal/ (or $OUT). FOCUS=focus
# runs only the focus parts, FOCUS=base only `main`. Measured on 2 CPU cores
# (run-minutes: the runs' summed wall time):
#   main            51 runs: 55 run-minutes, ~36 minutes with --parallel=2
#   init_1ep        16 runs (~1 epoch): 37 run-minutes, ~20 minutes
#   paper_defaults  27 runs: 20 run-minutes, ~10 minutes (all 2026-11-23/24)
#   unscaled        3 runs: 5 run-minutes (2026-11-24)
#   unscaled_32px   3 runs: 10 run-minutes (2026-11-26)
#   embed_reduction 6 runs: 11 run-minutes, --parallel=1 beside another
#                   study's runs (2026-11-26)
#   timing_32px     18 runs: 26 minutes, --parallel=1 with nothing beside it
#                   (2026-11-28); run it that way: its step times are the
#                   measurement
#
#   bash experiments/nonlocal/run.sh                        # everything
#   bash experiments/nonlocal/run.sh --parallel=2           # args go to `sweep run`
#   WORKDIR=/tmp/nl OUT=/tmp/nl_out bash experiments/nonlocal/run.sh \
#       --set total_steps=3 --only '*seed-0'                # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
exec bash "$(dirname "$0")/../run_study.sh" nonlocal "$@"
