"""Fused GPU kernels (Pallas' Triton lowering) against cuDNN and XLA: timings.

    python benchmarks/gpu_kernels.py                  # needs a GPU
    python benchmarks/gpu_kernels.py --lengths 1024 4096 --batch 2
    python benchmarks/gpu_kernels.py --blocks 64 32     # other pallas blocks
    python benchmarks/gpu_kernels.py --impls pallas cudnn --lengths 4096

Times forward and forward+backward (grad of ``sum(out)`` w.r.t. q, k, v),
bf16, ``[B, L, H, D]`` self-attention without a mask, at each length, for

* ``pallas``: ``dot_product_attention(..., implementation="pallas")``
  (``softattn.pallas.gpu``) for relu_seqlen, sigmoid and softmax;
* ``dense`` and ``chunked``: the XLA paths of the same call;
* ``cudnn``: ``jax.nn.dot_product_attention(..., implementation="cudnn")``,
  softmax only (the reference the issue's target is stated against:
  relu_seqlen and sigmoid fused at >= 1.1x cuDNN softmax's forward speed at
  L >= 4096, FlashSigmoid's claim on H100).

Each entry is the median over ``--iters`` samples after two warm-up calls,
in milliseconds. One sample is ``n`` calls issued back to back and waited
for once, divided by ``n`` (``n`` makes a sample last about 5 ms), so at
short lengths the time is the GPU's and not the host's dispatch of one
call. A configuration that fails (out of memory: dense at long L) prints
its exception's class. The forward's rate in TFLOP/s counts the two
matmuls, ``4 B H L^2 D`` (no causal saving). Each forward is also checked:
``fwd rel err`` is ``||out - ref|| / ||ref||`` against the float32 forward
on the chunked path from the same inputs (bf16 rounding gives ~2e-3), and
``grad rel err`` the worst of dQ, dK and dV of ``sum(out * g)`` (a fixed
random ``g``) against the same reference, so a fast but wrong kernel shows
in the table. Prints a table and writes JSON
to ``--out`` after every row, so a run cut short keeps what it measured.
Without a GPU it refuses with one line.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time

import jax
import jaxlib
import jax.numpy as jnp

from softattn import dot_product_attention

LENGTHS = (196, 576, 1024, 4096, 16384)
NORMALIZERS = ("relu_seqlen", "sigmoid", "softmax")
IMPLS = ("pallas", "dense", "chunked")


def _fn(normalizer, impl, blocks=(None, None)):
  if impl == "cudnn":
    return lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, implementation="cudnn")
  kw = {}
  if impl == "pallas":  # the GPU block rule unless overridden (--blocks)
    kw = dict(query_chunk_size=blocks[0], chunk_size=blocks[1])
  return lambda q, k, v: dot_product_attention(
      q, k, v, normalizer=normalizer, implementation=impl, **kw)


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
            blocks=(None, None), ref=None):
  """Times, and with ``ref`` (``reference``'s output) the relative errors
  ``||x - ref|| / ||ref||`` of the forward (``rel_err``) and of the worst of
  dQ, dK, dV (``grad_rel_err``), so a fast wrong kernel shows."""
  q, k, v = _inputs(length, batch, heads, head_dim)
  fwd = _fn(normalizer, impl, blocks)
  step = jax.grad(lambda q, k, v: jnp.sum(fwd(q, k, v).astype(jnp.float32)),
                  argnums=(0, 1, 2))
  row = dict(normalizer=normalizer, impl=impl, length=length,
             blocks=list(blocks))
  for label, fn in (("forward_ms", fwd), ("fwd_bwd_ms", step)):
    try:
      row[label] = _time(jax.jit(fn), (q, k, v), iters)
    except Exception as e:  # noqa: BLE001  (an OOM is a result here)
      row[label] = type(e).__name__
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
                       "instead of softattn.pallas.gpu_tile.block_sizes")
  ap.add_argument("--impls", nargs="+", default=IMPLS + ("cudnn",),
                  choices=IMPLS + ("cudnn",))
  ap.add_argument("--out", default="benchmarks/results/gpu_kernels.json")
  args = ap.parse_args(argv)
  if jax.default_backend() != "gpu":
    sys.exit(f"benchmarks/gpu_kernels.py needs a GPU (jax's default backend "
             f"is {jax.default_backend()!r}); nothing was timed")
  device = jax.devices()[0].device_kind
  rows = []
  for length in args.lengths:
    for name in args.normalizers:
      ref = reference(name, _inputs(length, args.batch, args.heads,
                                    args.head_dim))
      impls = [i for i in args.impls if i != "cudnn" or name == "softmax"]
      for impl in impls:
        rows.append(measure(name, impl, length, args.batch, args.heads,
                            args.head_dim, args.iters, tuple(args.blocks),
                            ref))
        print(*(str(rows[-1][k]) for k in rows[-1]), flush=True,
              file=sys.stderr)
        with open(args.out, "w") as f:  # after every row: see the docstring
          json.dump(dict(device=device, jax=jax.__version__,
                         jaxlib=jaxlib.__version__, dtype="bfloat16",
                         **vars(args), rows=rows), f, indent=1)
  print(f"{device}, jax {jax.__version__}, B={args.batch}, H={args.heads}, "
        f"D={args.head_dim}, bf16, median of {args.iters} (ms)")
  print(f"{'normalizer':>12} {'impl':>8} {'L':>6} {'forward':>9} "
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
    print(f"{r['normalizer']:>12} {r['impl']:>8} {r['length']:>6} "
          f"{_fmt(fwd)} {_fmt(r['fwd_bwd_ms'])} {rate} {ratio} "
          f"{r.get('rel_err', float('nan')):11.1e} "
          f"{r.get('grad_rel_err', float('nan')):12.1e}")


if __name__ == "__main__":
  main()
