#!/usr/bin/env bash
# The reduced-scale sinks study (experiments/sinks/sweep.py; parts declared in
# report.py's STUDY): part `main`, softmax, softmax + 4 registers,
# softmax_sink, softpick, relu/n, sigmoid and ssmax, and part `gate`, softmax
# with a head-wise output gate, each at 200 steps x 3 seeds on Fashion-MNIST at
# 49 tokens (24 runs); then the export's transfer probe evaluates each finished
# run at 100 and 196 tokens (48 evaluations, 2 at a time: probes.PARALLEL), and
# writes runs.csv, RESULTS.md and the plot in experiments/sinks/ (or $OUT).
# Estimated (not yet run): ~25 minutes elapsed on 2 CPU cores with
# --parallel=2, 24 x ~115 CPU core-seconds over 2 cores: one 200-step run
# (softmax, seed 0) took 39 s of wall time and 46 core-seconds alone, its
# evaluations at 100 and 196 tokens 22 and 47 s (22 and 48 core-seconds;
# measured 2026-11-29, other jobs on the machine at load ~2; the smoke test
# below, at load ~7, took 24 minutes for 8 runs and 16 evaluations).
#
#   bash experiments/sinks/run.sh --parallel=2          # everything
#   WORKDIR=/tmp/sk OUT=/tmp/sk_out bash experiments/sinks/run.sh \
#       --set total_steps=3 --only 'seed-0*'          # smoke test
#
# Interrupt at will: rerunning skips finished runs and evaluations.
set -euo pipefail
exec bash "$(dirname "$0")/../run_study.sh" sinks "$@"
