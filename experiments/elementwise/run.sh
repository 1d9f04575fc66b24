#!/usr/bin/env bash
# The reduced-scale element-wise attention study on Fashion-MNIST: the parts
# report.py's STUDY declares (sweep.py describes them), then the export's
# checkpoint probes (~7 minutes), runs.csv, RESULTS.md and the plots in
# experiments/elementwise/ (or $OUT). Measured on 2 CPU cores (run-minutes:
# the runs' summed wall time):
#   models, separate      1 epoch x 2 seeds: 24 runs, 46 run-minutes, ~25
#                         minutes with --parallel=2; the no-skip model's third
#                         seed: 62 CPU-seconds, 3.5 minutes on a loaded machine
#   noattn, noattn_10ep   5 runs: 105 run-seconds, 65 CPU-seconds (2026-11-24)
#   models_10ep, separate_10ep  12 runs: 114 run-minutes, ~60 minutes
#   df_10ep               6 runs: 101 run-minutes, ~50 minutes
#   e_10ep                3 runs: 40 run-minutes (all above: 2026-11-22/24)
#   control_step          3 runs of 1 step: 40 run-minutes on a machine shared
#                         with two other trainings, ~12 GB each (2026-11-26)
#   lr01_1ep              3 runs: 5 run-minutes with --parallel=1 (2026-11-26)
#   single_10ep, separate_skip_10ep  6 runs: 45 run-minutes, 26 minutes with
#                         --parallel=2 (2026-11-26)
#   gh_10ep               6 runs: 233 run-minutes, 212 CPU core-minutes, ~2 h
#                         with --parallel=2 on a shared machine (2026-11-26)
#   control               only with CONTROL=1: +42 minutes alone, ~12 GB
#
#   bash experiments/elementwise/run.sh --parallel=2      # everything
#   FOCUS=focus bash experiments/elementwise/run.sh --parallel=2   # the focus parts only
#   WORKDIR=/tmp/ew OUT=/tmp/ew_out bash experiments/elementwise/run.sh \
#       --set num_epochs=0.1 --only '*seed-0'             # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
OPTIONAL="${CONTROL:-0}" exec bash "$(dirname "$0")/../run_study.sh" elementwise "$@"
