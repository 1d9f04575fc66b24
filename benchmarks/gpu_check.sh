#!/usr/bin/env bash
# The GPU checks in one run, for a CUDA host with softattn's requirements:
#
#   bash benchmarks/gpu_check.sh [OUTDIR]     # default /tmp/softattn_gpu_check
#   STAGES="mosaic_tests mosaic_bench" bash benchmarks/gpu_check.sh OUT
#
# env.txt (the GPU from nvidia-smi, the jax/flax versions) always; then the
# STAGES, in order (default: all, the Mosaic GPU ones first, as issue #46
# needs them most):
#   mosaic_tests: tests/test_pallas_mosaic_gpu.py on the GPU itself, where
#     the Mosaic GPU kernels are compiled and run (off a GPU the same tests
#     run them in Mosaic GPU's interpreter), the device check included;
#     tests_mosaic.log;
#   mosaic_bench: benchmarks/gpu_kernels.py with the Mosaic GPU kernels
#     forced (--backend mosaic) against cuDNN softmax and dense in the same
#     run, MOSAIC_BENCH_ARGS (default: every length of its grid);
#     gpu_mosaic.{log,json};
#   kernel_tests: tests/test_pallas_gpu.py on the GPU (the Triton kernels);
#     tests_kernels.log;
#   bench: benchmarks/gpu_kernels.py, the timings under the default
#     backend choice (auto), BENCH_ARGS; gpu_kernels.{log,json};
#   sweep: the same benchmark over Triton launch parameters (num_warps,
#     num_stages) for the pallas kernels, SWEEP_ARGS (default: relu_seqlen
#     and softmax at L = 4096, six pairs, the rule's (8, 2) among them, so
#     the rule is timed in the same run); gpu_sweep.{log,json};
#   core_tests: the normalizer and attention tests with XLA:GPU as the
#     backend (the dense and chunked paths, f32 against float64
#     references); tests_core.log.
#
# Each stage has a wall-clock cap in seconds (MOSAIC_TESTS_S, MOSAIC_BENCH_S,
# KERNEL_TESTS_S, BENCH_S, SWEEP_S, CORE_TESTS_S), so a short machine lease
# gets back what finished; the benchmark rewrites its JSON after every row.
# The tests compile as the suite does (tests/conftest.py: XLA's backend
# optimizations off; the kernels are compiled by Triton or Mosaic GPU
# either way); the benchmark compiles as a user's program does.
#
# Stage times on an H200 (2026-11-28, benchmarks/README.md), to size a
# lease: the Triton kernel tests 48 s at 8 workers; the grid without chunked
# did not finish in 170 s (the Mosaic GPU example's compile at L = 16384
# alone outlasted 60 s), with chunked it takes longer still; the default
# sweep under 90 s; the core tests about 80 s (with the kernel tests,
# 126 s). A machine's start took about 30 s. The Mosaic GPU stages have
# never run (no GPU since they were written).
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

# pytest on the GPU: LABEL CAP_SECONDS LOG FILES...
run_tests() {
  local label=$1 cap=$2 log=$3
  shift 3
  echo "== $label (cap $cap s)"
  timeout "$cap" "$py" -m pytest -q -p no:cacheprovider -n "$workers" -rfE \
    "$@" 2>&1 | tee "$out/$log" | tail -25
}

# benchmarks/gpu_kernels.py: LABEL CAP_SECONDS NAME ARGS... (NAME.json, NAME.log)
run_bench() {
  local label=$1 cap=$2 name=$3
  shift 3
  echo "== $label (cap $cap s)"
  timeout "$cap" "$py" benchmarks/gpu_kernels.py --out "$out/$name.json" "$@" \
    2>&1 | tee "$out/$name.log" | tail -40
}

mosaic_tests() {
  run_tests "Mosaic GPU kernel tests" "${MOSAIC_TESTS_S:-240}" \
    tests_mosaic.log tests/test_pallas_mosaic_gpu.py
}

mosaic_bench() {
  # shellcheck disable=SC2086  # MOSAIC_BENCH_ARGS is a list of arguments
  run_bench "Mosaic GPU benchmark" "${MOSAIC_BENCH_S:-240}" gpu_mosaic \
    --iters 10 --backend mosaic ${MOSAIC_BENCH_ARGS:---impls pallas cudnn dense}
}

kernel_tests() {
  run_tests "Triton kernel tests" "${KERNEL_TESTS_S:-180}" tests_kernels.log \
    tests/test_pallas_gpu.py
}

bench() {
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
  run_bench "benchmark" "${BENCH_S:-240}" gpu_kernels --iters 10 ${BENCH_ARGS:-}
}

sweep() {
  # shellcheck disable=SC2086  # SWEEP_ARGS is a list of arguments
  run_bench "launch sweep" "${SWEEP_S:-120}" gpu_sweep \
    ${SWEEP_ARGS:---impls pallas --normalizers relu_seqlen softmax --lengths 4096 \
      --iters 10 --launches 8 2 4 2 4 3 8 3 4 4 8 4}
}

core_tests() {
  run_tests "core tests on XLA:GPU" "${CORE_TESTS_S:-150}" tests_core.log \
    tests/test_normalizers.py tests/test_attention.py tests/test_nn_attention.py
}

all="mosaic_tests mosaic_bench kernel_tests bench sweep core_tests"
for stage in ${STAGES:-$all}; do
  case " $all " in
    *" $stage "*) "$stage" ;;
    *) echo "unknown stage $stage; use some of: $all" >&2; exit 2 ;;
  esac
done
