#!/usr/bin/env bash
# The reduced-scale NormSoftmax study (experiments/normsoftmax/sweep.py; parts
# declared in report.py's STUDY): ViT softmax vs NSM at 3 budgets, without
# weight decay, the variants, and the NSM and LogitNorm cross-entropies on a
# PreResNet-20, on Fashion-MNIST (57 runs, 71 run-minutes: ~36 minutes on 2 CPU
# cores with --parallel=2, measured); the focus parts attention_1200, softmax /
# NSM-sqrt(d) / NSM-inf at 1200 steps x 3 seeds (51 run-minutes, ~26 minutes,
# measured), and loss_2ep / loss_softmax_2ep, the NSM-inf and softmax
# cross-entropies for 2 epochs x 3 seeds (18 run-minutes, ~9 minutes, measured
# 2026-11-24), loss_nsm1_2ep / loss_logitnorm_2ep, Table 4's other two rows at
# the same length (6 runs, 30 run-minutes, ~17 minutes beside a report export,
# measured 2026-11-26), and no_warmup / sgdm, Fig. 3b's ablations: softmax and
# NSM-inf at 200 steps without warmup or with SGDM x 3 seeds (12 runs, 17 + 8
# run-minutes, measured 2026-11-26 at --parallel=1). Then runs.csv, RESULTS.md
# and the plots in experiments/normsoftmax/ (or $OUT).
#
#   bash experiments/normsoftmax/run.sh --parallel=2      # everything
#   FOCUS=focus bash experiments/normsoftmax/run.sh --parallel=2   # focus parts only
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
exec bash "$(dirname "$0")/../run_study.sh" normsoftmax "$@"
