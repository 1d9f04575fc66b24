#!/usr/bin/env bash
# The reduced-scale NormSoftmax study (experiments/normsoftmax/sweep.py):
# ViT softmax vs NSM at 3 budgets, without weight decay, the variants, and
# the NSM cross-entropy on a PreResNet-20, on Fashion-MNIST: 54 runs, 55
# minutes on 2 CPU cores with --parallel=2. Then RESULTS.md and the plots in
# experiments/normsoftmax/ (or $OUT).
#
#   bash experiments/normsoftmax/run.sh                   # everything
#   bash experiments/normsoftmax/run.sh --parallel=2      # args go to `sweep run`
#   WORKDIR=/tmp/nsm OUT=/tmp/nsm_out bash experiments/normsoftmax/run.sh \
#       --only '*total_steps-50__*seed-0'                 # smoke test
# (the attention part sweeps total_steps itself, so --set cannot shorten
# it; the loss part's runs do not match and are skipped with an error line)
#
# Interrupt at will: rerunning skips finished runs and resumes the others.
set -euo pipefail
PARTS="attention loss loss_softmax" exec bash "$(dirname "$0")/../run_study.sh" normsoftmax "$@"
