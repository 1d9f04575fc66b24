#!/usr/bin/env bash
# The GPU checks in one run, for a CUDA host with softattn's requirements:
#
#   bash benchmarks/gpu_check.sh [OUTDIR]     # default /tmp/softattn_gpu_check
#
# 1. env.txt: the GPU (nvidia-smi) and the jax/flax versions;
# 2. tests_kernels.log: tests/test_pallas_gpu.py on the GPU itself. There
#    `implementation="pallas"` compiles the Triton kernels and runs them
#    (off a GPU the same tests run the kernel bodies in the interpreter);
# 3. gpu_kernels.{log,json}: benchmarks/gpu_kernels.py, the timings;
# 4. gpu_sweep.{log,json}: the same benchmark over Triton launch parameters
#    (num_warps, num_stages) for the pallas kernels, SWEEP_ARGS (default:
#    relu_seqlen and softmax at L = 4096, six pairs, the rule's (8, 2) among
#    them, so the rule is timed in the same run);
# 5. tests_core.log: the normalizer and attention tests with XLA:GPU as the
#    backend (the dense and chunked paths, f32 against float64 references).
#
# Each stage has a wall-clock cap in seconds (KERNEL_TESTS_S, BENCH_S,
# SWEEP_S, CORE_TESTS_S), so a short machine lease gets back what finished;
# the benchmark rewrites its JSON after every row. BENCH_ARGS passes
# arguments to the benchmark (default: its own grid at 10 samples per
# entry). The tests compile as the suite does (tests/conftest.py: XLA's
# backend optimizations off; the Triton kernels are compiled by Triton
# either way); the benchmark compiles as a user's program does.
#
# Stage times on an H200 (2026-11-28, benchmarks/README.md), to size a
# lease: the kernel tests 48 s at 8 workers; the grid without chunked did
# not finish in 170 s (the Mosaic GPU example's compile at L = 16384 alone
# outlasted 60 s), with chunked it takes longer still; the default sweep
# under 90 s; the core tests about 80 s (with the kernel tests, 126 s). A
# machine's start took about 30 s.
set -u
out=${1:-/tmp/softattn_gpu_check}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# Several pytest workers share the one GPU: no worker takes 75% up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
workers=${WORKERS:-8}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
    --format=csv
  "$py" -c 'import sys, jax, jaxlib, flax, optax
print("python", sys.version.split()[0], "jax", jax.__version__, "jaxlib",
      jaxlib.__version__, "flax", flax.__version__, "optax", optax.__version__)
print("devices", jax.devices())'
} 2>&1 | tee "$out/env.txt"

echo "== kernel tests (cap ${KERNEL_TESTS_S:-180} s)"
timeout "${KERNEL_TESTS_S:-180}" "$py" -m pytest -q -p no:cacheprovider \
  -n "$workers" -rfE tests/test_pallas_gpu.py 2>&1 | tee "$out/tests_kernels.log" | tail -25

echo "== benchmark (cap ${BENCH_S:-240} s)"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
timeout "${BENCH_S:-240}" "$py" benchmarks/gpu_kernels.py --iters 10 \
  --out "$out/gpu_kernels.json" ${BENCH_ARGS:-} 2>&1 | tee "$out/gpu_kernels.log" | tail -40

echo "== launch sweep (cap ${SWEEP_S:-120} s)"
# shellcheck disable=SC2086  # SWEEP_ARGS is a list of arguments
timeout "${SWEEP_S:-120}" "$py" benchmarks/gpu_kernels.py --out "$out/gpu_sweep.json" \
  ${SWEEP_ARGS:---impls pallas --normalizers relu_seqlen softmax --lengths 4096 \
    --iters 10 --launches 8 2 4 2 4 3 8 3 4 4 8 4} \
  2>&1 | tee "$out/gpu_sweep.log" | tail -20

echo "== core tests on XLA:GPU (cap ${CORE_TESTS_S:-150} s)"
timeout "${CORE_TESTS_S:-150}" "$py" -m pytest -q -p no:cacheprovider \
  -n "$workers" -rfE tests/test_normalizers.py tests/test_attention.py \
  tests/test_nn_attention.py 2>&1 | tee "$out/tests_core.log" | tail -25
