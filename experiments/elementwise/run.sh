#!/usr/bin/env bash
# The reduced-scale element-wise attention study (experiments/elementwise/
# sweep.py; parts declared in report.py's STUDY): models A-H, single head
# and no-skip, separate optimizers (1 epoch x 2 seeds: 24 runs, 46
# run-minutes of wall time, ~25 minutes on 2 CPU cores with --parallel=2;
# a third seed of the no-skip model, 1 run, 62 CPU-seconds, 3.5 minutes
# wall on a loaded machine); the attention-free baseline noattn and
# noattn_10ep (1 epoch x 2 seeds and 10 epochs x 3 seeds: 5 runs, 105
# run-seconds of wall time, 65 CPU-seconds; measured 2026-11-24);
# A, B, C and B without skip at the paper's 10 epochs x 3 seeds (12 runs,
# 114 run-minutes, ~60 minutes); the focus parts df_10ep, D and F at 10
# epochs x 3 seeds (6 runs, 101 run-minutes, ~50 minutes), and e_10ep, E
# at 10 epochs x 3 seeds (3 runs, 40 run-minutes; all measured
# 2026-11-22/24), and control_step, the VGG control for 1 train step x 3
# seeds, its cost per step (3 runs, 40 run-minutes on a machine shared
# with two other trainings, ~12 GB each; measured 2026-11-26), and
# lr01_1ep, B on Adam lr 0.1 for every weight, 1 epoch x 3 seeds (3 runs,
# 5 run-minutes with --parallel=1; measured 2026-11-26); single_10ep and
# separate_skip_10ep, the appendix's single head and B on separate
# optimizers at 10 epochs x 3 seeds (6 runs, 45 run-minutes, 26 minutes
# with --parallel=2; measured 2026-11-26); gh_10ep, G and H at 10 epochs x 3
# seeds (6 runs, 233 run-minutes, 212 CPU core-minutes, ~2 h with
# --parallel=2 on a machine shared with other work; measured 2026-11-26); the full
# VGG control only with CONTROL=1 (+42 min alone,
# ~12 GB). Then the export's checkpoint probes (~7 minutes), runs.csv,
# RESULTS.md and the plots in experiments/elementwise/ (or $OUT).
#
#   bash experiments/elementwise/run.sh --parallel=2      # everything
#   FOCUS=focus bash experiments/elementwise/run.sh --parallel=2   # df_10ep and e_10ep only
#   WORKDIR=/tmp/ew OUT=/tmp/ew_out bash experiments/elementwise/run.sh \
#       --set num_epochs=0.1 --only '*seed-0'             # smoke test
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
OPTIONAL="${CONTROL:-0}" exec bash "$(dirname "$0")/../run_study.sh" elementwise "$@"
