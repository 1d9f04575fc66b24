"""Fused GPU kernels (Pallas' Triton lowering) against cuDNN and XLA: timings.

    python benchmarks/gpu_kernels.py                  # needs a GPU
    python benchmarks/gpu_kernels.py --lengths 1024 4096 --batch 2
    python benchmarks/gpu_kernels.py --blocks 64 32     # other pallas blocks

Times forward and forward+backward (grad of ``sum(out)`` w.r.t. q, k, v),
bf16, ``[B, L, H, D]`` self-attention without a mask, at each length, for

* ``pallas``: ``dot_product_attention(..., implementation="pallas")``
  (``softattn.pallas.gpu``) for relu_seqlen, sigmoid and softmax;
* ``dense`` and ``chunked``: the XLA paths of the same call;
* ``cudnn``: ``jax.nn.dot_product_attention(..., implementation="cudnn")``,
  softmax only (the reference the issue's target is stated against:
  relu_seqlen and sigmoid fused at >= 1.1x cuDNN softmax's forward speed at
  L >= 4096, FlashSigmoid's claim on H100).

Each entry is the median of ``--iters`` runs after two warm-up calls, in
milliseconds; a configuration that fails (out of memory: dense at long L)
prints its exception's class. Prints a table and writes JSON to
``--out``. Without a GPU it refuses with one line: nothing in
``benchmarks/README.md`` was timed on a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
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


def _time(fn, args, iters):
  out = fn(*args)
  jax.block_until_ready(out)
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(iters):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return 1e3 * statistics.median(times)


def measure(normalizer, impl, length, batch, heads, head_dim, iters,
            blocks=(None, None)):
  ks = jax.random.split(jax.random.PRNGKey(0), 3)
  shape = (batch, length, heads, head_dim)
  q, k, v = (jax.random.normal(kk, shape, jnp.bfloat16) for kk in ks)
  fwd = _fn(normalizer, impl, blocks)
  step = jax.grad(lambda q, k, v: jnp.sum(fwd(q, k, v).astype(jnp.float32)),
                  argnums=(0, 1, 2))
  row = dict(normalizer=normalizer, impl=impl, length=length)
  for label, fn in (("forward_ms", fwd), ("fwd_bwd_ms", step)):
    try:
      row[label] = _time(jax.jit(fn), (q, k, v), iters)
    except Exception as e:  # noqa: BLE001  (an OOM is a result here)
      row[label] = type(e).__name__
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
                  help="pallas query/key blocks (powers of two) instead of "
                       "softattn.pallas.gpu_tile.block_sizes")
  ap.add_argument("--out", default="benchmarks/results/gpu_kernels.json")
  args = ap.parse_args(argv)
  if jax.default_backend() != "gpu":
    sys.exit(f"benchmarks/gpu_kernels.py needs a GPU (jax's default backend "
             f"is {jax.default_backend()!r}); nothing was timed")
  device = jax.devices()[0].device_kind
  rows = []
  for length in args.lengths:
    for name in args.normalizers:
      impls = IMPLS + (("cudnn",) if name == "softmax" else ())
      for impl in impls:
        rows.append(measure(name, impl, length, args.batch, args.heads,
                            args.head_dim, args.iters, tuple(args.blocks)))
        print(*(str(rows[-1][k]) for k in rows[-1]), flush=True,
              file=sys.stderr)
  print(f"{device}, B={args.batch}, H={args.heads}, D={args.head_dim}, bf16, "
        f"median of {args.iters} (ms)")
  print(f"{'normalizer':>12} {'impl':>8} {'L':>6} {'forward':>9} "
        f"{'fwd+bwd':>9} {'fwd vs cudnn softmax':>21}")
  cudnn = {r["length"]: r["forward_ms"] for r in rows if r["impl"] == "cudnn"}
  for r in rows:
    ref, fwd = cudnn.get(r["length"]), r["forward_ms"]
    ratio = (f"{ref / fwd:20.2f}x" if isinstance(ref, float)
             and isinstance(fwd, float) else f"{'-':>21}")
    print(f"{r['normalizer']:>12} {r['impl']:>8} {r['length']:>6} "
          f"{_fmt(fwd)} {_fmt(r['fwd_bwd_ms'])} {ratio}")
  with open(args.out, "w") as f:
    json.dump(dict(device=device, batch=args.batch, heads=args.heads,
                   head_dim=args.head_dim, dtype="bfloat16", rows=rows), f,
              indent=1)


if __name__ == "__main__":
  main()
