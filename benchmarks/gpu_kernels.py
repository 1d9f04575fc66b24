"""Fused GPU kernels (Pallas' Triton lowering) against cuDNN and XLA: timings.

    python benchmarks/gpu_kernels.py                  # needs a GPU
    python benchmarks/gpu_kernels.py --lengths 1024 4096 --batch 2
    python benchmarks/gpu_kernels.py --blocks 64 32     # other pallas blocks
    python benchmarks/gpu_kernels.py --impls pallas cudnn --lengths 4096
    python benchmarks/gpu_kernels.py --backend mosaic --impls pallas  # Hopper

Times forward and forward+backward (grad of ``sum(out)`` w.r.t. q, k, v),
bf16, ``[B, L, H, D]`` self-attention without a mask, at each length, for

* ``pallas``: ``dot_product_attention(..., implementation="pallas")``
  (``softattn.pallas.gpu.triton``) for relu_seqlen, sigmoid and softmax;
* ``dense`` and ``chunked``: the XLA paths of the same call;
* ``cudnn``: ``jax.nn.dot_product_attention(..., implementation="cudnn")``,
  softmax only (the reference the issue's target is stated against:
  relu_seqlen and sigmoid fused at >= 1.1x cuDNN softmax's forward speed at
  L >= 4096, FlashSigmoid's claim on H100);
* ``mgpu``: jax's own Mosaic GPU softmax attention for Hopper
  (``jax.experimental.pallas.ops.gpu.attention_mgpu``, an example kernel
  jax ships, not part of softattn), softmax only, q pre-scaled by
  ``1/sqrt(D)`` as it applies no scale, and given float16 (its kernel keeps
  float16 buffers; the casts of the bf16 inputs, exact for these values, are
  in its time): what Pallas' Mosaic GPU lowering reaches on the chip, the
  yardstick for porting the Triton kernels to it. It takes lengths that are
  multiples of 128 only.

``--backend mosaic`` (or ``triton``) forces the kernels ``pallas`` runs
(``SOFTATTN_GPU_KERNELS``, ``softattn.pallas.gpu.backend``; default
``auto``: its rule, Mosaic GPU on a Hopper where its one-off device check
against dense passes, which the warm-up calls pay for, else Triton); the
Mosaic GPU kernels need a Hopper GPU and blocks that are multiples of 64.
Never run so far (no GPU since they were written): ``STAGES="mosaic_tests
mosaic_bench" bash benchmarks/gpu_check.sh OUT`` is the prepared run.

``--launches W S [W S ...]`` times the pallas kernels under each Triton
``num_warps``/``num_stages`` pair in turn instead of
``gpu_tile.compiler_params``' rule (a sweep; each row records its pair).

Each entry is the median over ``--iters`` samples after two warm-up calls, in
milliseconds. One sample is ``n`` calls issued back to back and waited for
once, divided by ``n`` (``n`` makes a sample last about 5 ms), so at short
lengths the time is the GPU's and not the host's dispatch of one call. A
configuration that fails (out of memory: dense at long L) prints its
exception's class (the JSON keeps the message's start). The forward's rate in
TFLOP/s counts the two matmuls, ``4 B H L^2 D`` (no causal saving). Each
forward is also checked: ``fwd rel err`` is ``||out - ref|| / ||ref||`` against
the float32 forward on the chunked path from the same inputs (bf16 rounding
gives ~2e-3), and ``grad rel err`` the worst of dQ, dK and dV of
``sum(out * g)`` (a fixed random ``g``) against the same reference, so a fast
but wrong kernel shows in the table. Prints a table and writes JSON to
``--out`` after every row, so a run cut short keeps what it measured. Without
a GPU it refuses with one line."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import sys
import time

import jax
import jaxlib
import jax.numpy as jnp

from jax.experimental.pallas import triton as plgpu

from softattn import dot_product_attention
from softattn.pallas.gpu.triton import tile as gpu_tile

LENGTHS = (196, 576, 1024, 4096, 16384)
NORMALIZERS = ("relu_seqlen", "sigmoid", "softmax")
IMPLS = ("pallas", "dense", "chunked")
SOFTMAX_ONLY = ("cudnn", "mgpu")  # other kernels, timed for softmax alone


def _fn(normalizer, impl, blocks=(None, None)):
  if impl == "cudnn":
    return lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, implementation="cudnn")
  if impl == "mgpu":
    from jax.experimental.pallas.ops.gpu import attention_mgpu as mgpu
    bwd = dict(block_q_dkv=64, block_kv_dkv=64, block_q_dq=64,
               block_kv_dq=64)  # its backward needs all four
    cfg = mgpu.TuningConfig(block_q=64, block_kv=128, max_concurrent_steps=2,
                            **bwd)
    def f16(x):  # bf16 -> f16 is exact for these inputs' range
      return x.astype(jnp.float16)
    def scaled(q):
      return q * jnp.asarray(q.shape[-1] ** -0.5, q.dtype)
    return lambda q, k, v: mgpu.attention(f16(scaled(q)), f16(k), f16(v), cfg)
  kw = {}
  if impl == "pallas":  # the GPU block rule unless overridden (--blocks)
    kw = dict(query_chunk_size=blocks[0], chunk_size=blocks[1])
  return lambda q, k, v: dot_product_attention(
      q, k, v, normalizer=normalizer, implementation=impl, **kw)


@contextlib.contextmanager
def launch(pair):
  """Every pallas kernel traced inside compiles with Triton's ``num_warps``,
  ``num_stages`` = ``pair`` (None: ``gpu_tile.compiler_params``' rule)."""
  rule = gpu_tile.compiler_params
  if pair is not None:
    gpu_tile.compiler_params = lambda d, num_stages=2: plgpu.CompilerParams(
        num_warps=pair[0], num_stages=pair[1])
  try:
    yield
  finally:
    gpu_tile.compiler_params = rule


def _time(fn, args, iters, sample_s=5e-3):
  jax.block_until_ready(fn(*args))
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  n = max(1, min(100, round(sample_s / (time.perf_counter() - t0))))
  times = []
  for _ in range(iters):
    t0 = time.perf_counter()
    for _ in range(n):
      out = fn(*args)
    jax.block_until_ready(out)
    times.append((time.perf_counter() - t0) / n)
  return 1e3 * statistics.median(times)


def _inputs(length, batch, heads, head_dim):
  ks = jax.random.split(jax.random.PRNGKey(0), 3)
  shape = (batch, length, heads, head_dim)
  return tuple(jax.random.normal(kk, shape, jnp.bfloat16) for kk in ks)


def _cotangent(shape):
  """A fixed random output cotangent: the checked gradients are those of
  ``sum(out * g)``, which unlike ``sum(out)`` exercises every weight."""
  return jax.random.normal(jax.random.PRNGKey(1), shape, jnp.float32)


def _out_and_grads(fwd, q, k, v):
  g = _cotangent(q.shape[:3] + (v.shape[-1],))
  def loss(q, k, v):
    return jnp.sum(fwd(q, k, v).astype(jnp.float32) * g)
  return (fwd(q, k, v).astype(jnp.float32),
          jax.grad(loss, argnums=(0, 1, 2))(q, k, v))


def reference(normalizer, qkv):
  """The forward and the gradients of ``sum(out * g)`` in float32 on the
  chunked path (it fits at any length), from the same bf16 inputs, at full
  f32 matmul precision."""
  f32 = [x.astype(jnp.float32) for x in qkv]
  with jax.default_matmul_precision("highest"):
    return jax.jit(functools.partial(_out_and_grads,
                                     _fn(normalizer, "chunked")))(*f32)


def _rel(x, ref):
  x = jnp.asarray(x, jnp.float32)
  return float(jnp.linalg.norm(x - ref) / jnp.linalg.norm(ref))


def measure(normalizer, impl, length, batch, heads, head_dim, iters,
            blocks=(None, None), ref=None, launch_pair=None):
  """Times, and with ``ref`` (``reference``'s output) the relative errors
  ``||x - ref|| / ||ref||`` of the forward (``rel_err``) and of the worst of
  dQ, dK, dV (``grad_rel_err``), so a fast wrong kernel shows."""
  q, k, v = _inputs(length, batch, heads, head_dim)
  fwd = _fn(normalizer, impl, blocks)
  step = jax.grad(lambda q, k, v: jnp.sum(fwd(q, k, v).astype(jnp.float32)),
                  argnums=(0, 1, 2))
  row = dict(normalizer=normalizer, impl=impl, length=length,
             blocks=list(blocks), launch=launch_pair)
  with launch(launch_pair):  # the checks below trace the same kernels
    for label, fn in (("forward_ms", fwd), ("fwd_bwd_ms", step)):
      try:
        row[label] = _time(jax.jit(fn), (q, k, v), iters)
      except Exception as e:  # noqa: BLE001  (an OOM is a result here)
        row[label] = type(e).__name__
        row[label + "_error"] = f"{type(e).__name__}: {e}"[:300]
    if ref is not None and isinstance(row["forward_ms"], float):
      ref_out, ref_grads = ref
      # One forward serves both checks where the backward ran.
      grads = None
      if isinstance(row["fwd_bwd_ms"], float):
        out, grads = jax.jit(functools.partial(_out_and_grads, fwd))(q, k, v)
      else:
        out = jax.jit(fwd)(q, k, v)
      row["rel_err"] = _rel(out, ref_out)
      if grads is not None:
        row["grad_rel_err"] = max(map(_rel, grads, ref_grads))
  return row


def _fmt(x):
  return f"{x:9.3f}" if isinstance(x, float) else f"{x[:9]:>9}"


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
  ap.add_argument("--normalizers", nargs="+", default=NORMALIZERS)
  ap.add_argument("--batch", type=int, default=4)
  ap.add_argument("--heads", type=int, default=16)
  ap.add_argument("--head-dim", type=int, default=128)
  ap.add_argument("--iters", type=int, default=20)
  ap.add_argument("--blocks", type=int, nargs=2, default=(None, None),
                  metavar=("BQ", "BK"),
                  help="pallas query/key blocks (powers of two >= 16) "
                       "instead of softattn.pallas.gpu.triton.tile.block_sizes")
  ap.add_argument("--impls", nargs="+", default=IMPLS + SOFTMAX_ONLY,
                  choices=IMPLS + SOFTMAX_ONLY)
  ap.add_argument("--launches", type=int, nargs="+", default=None,
                  metavar="W S",
                  help="pairs of Triton num_warps and num_stages: time the "
                       "pallas kernels under each instead of "
                       "gpu_tile.compiler_params' rule")
  ap.add_argument("--backend", default="auto",
                  choices=("auto", "mosaic", "triton"),
                  help="GPU kernels pallas runs (auto: gpu/backend.py's "
                       "rule)")
  ap.add_argument("--out", default="benchmarks/results/gpu_kernels.json")
  args = ap.parse_args(argv)
  if args.launches and len(args.launches) % 2:
    ap.error("--launches takes pairs: num_warps num_stages [...]")
  launches = (list(zip(args.launches[::2], args.launches[1::2]))
              if args.launches else [None])
  if jax.default_backend() != "gpu":
    sys.exit(f"benchmarks/gpu_kernels.py needs a GPU (jax's default backend "
             f"is {jax.default_backend()!r}); nothing was timed")
  device = jax.devices()[0].device_kind
  if args.backend != "auto":
    from softattn.pallas.gpu import backend  # noqa: PLC0415
    if args.backend == "mosaic" and not backend.is_hopper(device):
      sys.exit(f"--backend mosaic needs a Hopper GPU (H100/H200), this is "
               f"{device!r}; use --backend triton or auto")
    os.environ[backend.ENV] = args.backend   # the library's own switch
  rows = []
  for length in args.lengths:
    for name in args.normalizers:
      ref = reference(name, _inputs(length, args.batch, args.heads,
                                    args.head_dim))
      runs = [(i, pair) for i in args.impls
              if i not in SOFTMAX_ONLY or name == "softmax"
              for pair in (launches if i == "pallas" else [None])]
      for impl, pair in runs:
        rows.append(measure(name, impl, length, args.batch, args.heads,
                            args.head_dim, args.iters, tuple(args.blocks),
                            ref, pair))
        print(*(str(rows[-1][k]) for k in rows[-1]), flush=True,
              file=sys.stderr)
        with open(args.out, "w") as f:  # after every row: see the docstring
          json.dump(dict(device=device, jax=jax.__version__,
                         jaxlib=jaxlib.__version__, dtype="bfloat16",
                         **vars(args), rows=rows), f, indent=1)
  print(f"{device}, jax {jax.__version__}, B={args.batch}, H={args.heads}, "
        f"D={args.head_dim}, bf16, median of {args.iters} (ms)")
  print(f"{'normalizer':>12} {'impl':>12} {'L':>6} {'forward':>9} "
        f"{'fwd+bwd':>9} {'fwd TFLOP/s':>11} {'fwd vs cudnn softmax':>21} "
        f"{'fwd rel err':>11} {'grad rel err':>12}")
  cudnn = {r["length"]: r["forward_ms"] for r in rows if r["impl"] == "cudnn"}
  # By length; within a length, in the order measured (sorted is stable).
  for r in sorted(rows, key=lambda r: r["length"]):
    ref, fwd = cudnn.get(r["length"]), r["forward_ms"]
    ratio = (f"{ref / fwd:20.2f}x" if isinstance(ref, float)
             and isinstance(fwd, float) else f"{'-':>21}")
    flops = 4 * args.batch * args.heads * r["length"] ** 2 * args.head_dim
    rate = (f"{flops / fwd / 1e9:11.1f}" if isinstance(fwd, float)
            else f"{'-':>11}")
    impl = r["impl"] + ("" if r["launch"] is None
                        else "@{}w{}s".format(*r["launch"]))
    print(f"{r['normalizer']:>12} {impl:>12} {r['length']:>6} "
          f"{_fmt(fwd)} {_fmt(r['fwd_bwd_ms'])} {rate} {ratio} "
          f"{r.get('rel_err', float('nan')):11.1e} "
          f"{r.get('grad_rel_err', float('nan')):12.1e}")


if __name__ == "__main__":
  main()
