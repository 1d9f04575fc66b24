"""Attention benchmark: time and memory per normalizer and implementation.

    python benchmarks/attention.py                      # the default grid
    python benchmarks/attention.py --lengths 256 1024 --normalizers softmax scaled
    python benchmarks/attention.py --quick              # tiny smoke run

For each (L, normalizer, implementation) it jits the forward and the
forward+backward (gradient w.r.t. q, k, v of ``sum(out)``) and reports the
median wall and CPU time of ``--repeats`` runs after one warm-up run (past
L=4096: one run, no warm-up, since one run takes minutes), and XLA's buffer
plan for the forward+backward (temporaries + arguments + outputs, from
``compiled.memory_analysis()``: the memory the computation needs, measured
before running it). ``jax.nn.dot_product_attention`` is measured in the same run
as the reference. A configuration whose plan exceeds ``--max-gib`` is reported
as "does not fit" with its need, not run and not hidden.

Shapes: B=8, H=8, D=64 by default, layout [B, L, H, D]. Results go to stdout
(a markdown table plus the issue's target ratios) and to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp

from softattn import dot_product_attention
from softattn import normalizers as N

# Grid: every normalizer at short lengths, the main ones at 4096, the memory
# story at 16384 (dense cannot fit there; chunked and linear must).
DEFAULT_GRID = {
    256: "all",
    1024: "all",
    4096: ["softmax", "normsoftmax", "relu_seqlen", "scaled"],
    16384: ["softmax@dense", "softmax@chunked", "scaled@dense", "scaled@linear"],
}
LEARNABLE = {"normsoftmax_learnable": {"w": 1.0}, "ssmax": {"s_scale": 0.5}}
GIB = 2**30


def implementations(name, length):
  norm = N.get(name)
  impls = ["dense"]
  if norm.streamable:
    impls.append("chunked")
  if norm.is_linear:
    impls.append("linear")
  return impls


def _inputs(b, length, h, d, dtype):
  ks = jax.random.split(jax.random.PRNGKey(0), 3)
  return tuple(jax.random.normal(k, (b, length, h, d), dtype) for k in ks)


def _fns(name, impl, chunk):
  if name == "jax.nn":
    fwd = lambda q, k, v: jax.nn.dot_product_attention(q, k, v)  # noqa: E731
  else:
    params = LEARNABLE.get(name)
    fwd = lambda q, k, v: dot_product_attention(  # noqa: E731
        q, k, v, normalizer=name, normalizer_params=params,
        implementation=impl, chunk_size=chunk)
  fwd_bwd = jax.grad(lambda q, k, v: jnp.sum(fwd(q, k, v)), argnums=(0, 1, 2))
  return jax.jit(fwd), jax.jit(fwd_bwd)


def _plan_bytes(compiled):
  m = compiled.memory_analysis()
  return (m.temp_size_in_bytes + m.argument_size_in_bytes +
          m.output_size_in_bytes)


def _time(fn, args, repeats, warmup=True):
  """Median wall and process-CPU seconds of ``repeats`` runs after a warm-up.

  CPU time (all threads) is the steadier measure on a shared machine: other
  jobs' load stretches wall time but not the work this computation does.
  """
  if warmup:  # compilation is done already; this settles caches/allocations
    jax.block_until_ready(fn(*args))
  wall, cpu = [], []
  for _ in range(repeats):
    t0, c0 = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn(*args))
    wall.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
  return statistics.median(wall), statistics.median(cpu)


def measure(name, impl, length, args, repeats, chunk, max_bytes):
  fwd, fwd_bwd = _fns(name, impl, chunk)
  row = dict(normalizer=name, impl=impl, L=length)
  shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
  compiled_fb = fwd_bwd.lower(*shapes).compile()
  compiled_f = fwd.lower(*shapes).compile()
  row["fwd_bwd_plan_gib"] = _plan_bytes(compiled_fb) / GIB
  row["fwd_plan_gib"] = _plan_bytes(compiled_f) / GIB
  if _plan_bytes(compiled_fb) > max_bytes:
    row["status"] = "does not fit"
    return row
  # Past L=4096 one run takes minutes: a single timed run, no warm-up.
  warmup = length <= 4096
  row["fwd_s"], row["fwd_cpu_s"] = _time(compiled_f, args, repeats, warmup)
  row["fwd_bwd_s"], row["fwd_bwd_cpu_s"] = _time(compiled_fb, args, repeats,
                                                  warmup)
  row["status"] = "ok"
  return row


def _repeats_for(length, base):
  return base if length <= 1024 else max(1, base // 3 if length <= 4096 else 1)


def targets(rows):
  """The core issue's target ratios, from this run's rows."""
  get = {(r["normalizer"], r["impl"], r["L"]): r for r in rows}

  def t(name, impl, length, key="fwd_bwd_s"):
    r = get.get((name, impl, length))
    return r.get(key) if r else None

  def ratio(a, b):
    return None if a is None or b is None else a / b

  out = []
  def add(what, value, goal, ok):
    out.append(dict(target=what, value=value, goal=goal,
                    met=None if value is None else ok(value)))
  for key, unit in (("fwd_bwd_s", "wall"), ("fwd_bwd_cpu_s", "CPU")):
    add(f"dense softmax / jax.nn fwd+bwd {unit} time, L=1024",
        ratio(t("softmax", "dense", 1024, key), t("jax.nn", "xla", 1024, key)),
        "<= 1.0", lambda v: v <= 1.0)
    add(f"dense softmax / dense relu_seqlen fwd+bwd {unit} time, L=1024",
        ratio(t("softmax", "dense", 1024, key),
              t("relu_seqlen", "dense", 1024, key)), ">= 1.3",
        lambda v: v >= 1.3)
    add(f"dense softmax / linear scaled fwd+bwd {unit} time, L=4096",
        ratio(t("softmax", "dense", 4096, key), t("scaled", "linear", 4096, key)),
        ">= 10", lambda v: v >= 10)
    add(f"chunked / dense softmax fwd+bwd {unit} time, L=4096",
        ratio(t("softmax", "chunked", 4096, key),
              t("softmax", "dense", 4096, key)), "<= 1.5", lambda v: v <= 1.5)
  chunk_mem = get.get(("softmax", "chunked", 16384))
  dense_mem = get.get(("softmax", "dense", 16384))
  mem = None
  if chunk_mem and dense_mem and chunk_mem.get("status") == "ok":
    mem = chunk_mem["fwd_bwd_plan_gib"] / dense_mem["fwd_bwd_plan_gib"]
  add("chunked / dense softmax fwd+bwd memory, L=16384 (chunked ran)", mem,
      "<= 0.125", lambda v: v <= 0.125)
  return out


def _fmt(v, spec):
  return "-" if v is None else format(v, spec)


def table(rows):
  lines = ["| L | normalizer | impl | fwd ms | fwd+bwd ms | fwd+bwd CPU ms "
           "| fwd+bwd plan GiB | status |", "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    ms = lambda k: None if r.get(k) is None else 1e3 * r[k]  # noqa: E731
    lines.append(
        f"| {r['L']} | {r['normalizer']} | {r['impl']} | {_fmt(ms('fwd_s'), '.1f')} "
        f"| {_fmt(ms('fwd_bwd_s'), '.1f')} | {_fmt(ms('fwd_bwd_cpu_s'), '.1f')} "
        f"| {_fmt(r.get('fwd_bwd_plan_gib'), '.3f')} "
        f"| {r['status']} |")
  return "\n".join(lines)


def target_table(tgts):
  lines = ["| target | measured | goal | met |", "|---|---|---|---|"]
  for t in tgts:
    met = "-" if t["met"] is None else ("yes" if t["met"] else "NO")
    lines.append(f"| {t['target']} | {_fmt(t['value'], '.3f')} | {t['goal']} | {met} |")
  return "\n".join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--lengths", type=int, nargs="*", default=None)
  ap.add_argument("--normalizers", nargs="*", default=None,
                  help="names or spec strings (default: the grid); "
                       "'name@impl' measures only that implementation")
  ap.add_argument("--impls", nargs="*", default=None,
                  help="restrict to these implementations")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--heads", type=int, default=8)
  ap.add_argument("--head-dim", type=int, default=64)
  ap.add_argument("--chunk", type=int, default=512)
  ap.add_argument("--repeats", type=int, default=5,
                  help="timed runs at L<=1024 (fewer at longer L)")
  ap.add_argument("--max-gib", type=float, default=16.0,
                  help="skip (and report) configurations whose plan exceeds this")
  ap.add_argument("--quick", action="store_true", help="tiny smoke run")
  ap.add_argument("--out", default="benchmarks/results/attention.json")
  ap.add_argument("--merge", nargs="*", default=(),
                  help="earlier JSON outputs whose rows join this run's table "
                       "and targets (e.g. a separate long-L run)")
  args = ap.parse_args(argv)

  if args.quick:
    grid = {64: ["softmax", "relu_seqlen", "scaled", "sparsemax"]}
    args.batch, args.heads, args.head_dim, args.repeats = 2, 2, 16, 2
    args.chunk = 32
  elif args.lengths or args.normalizers:
    lengths = args.lengths or list(DEFAULT_GRID)
    grid = {length: args.normalizers or DEFAULT_GRID.get(length, "all")
            for length in lengths}
  else:
    grid = DEFAULT_GRID

  rows = []
  for length, names in grid.items():
    if names == "all":
      names = [n for n in N.names() if n != "prenorm"]
    qkv = _inputs(args.batch, length, args.heads, args.head_dim, jnp.float32)
    jobs = [("jax.nn", "xla")]
    for n in names:
      n, _, only = n.partition("@")
      jobs += [(n, i) for i in implementations(n, length) if i == (only or i)]
    for name, impl in jobs:
      if args.impls and impl not in args.impls and name != "jax.nn":
        continue
      row = measure(name, impl, length, qkv, _repeats_for(length, args.repeats),
                    min(args.chunk, length), args.max_gib * GIB)
      rows.append(row)
      print(f"L={length:6d} {name:24s} {impl:8s} {row['status']:12s} "
            f"fwd={_fmt(row.get('fwd_s'), '.4f')}s "
            f"fwd+bwd={_fmt(row.get('fwd_bwd_s'), '.4f')}s "
            f"plan={row['fwd_bwd_plan_gib']:.3f}GiB", flush=True)
    del qkv

  for path in args.merge:
    with open(path) as f:
      earlier = json.load(f)["rows"]
    known = {(r["normalizer"], r["impl"], r["L"]) for r in rows}
    rows += [r for r in earlier
             if (r["normalizer"], r["impl"], r["L"]) not in known]
  tgts = targets(rows)
  print("\n" + table(rows) + "\n\n" + target_table(tgts))
  meta = dict(device=str(jax.devices()[0]), backend=jax.default_backend(),
              cpu_count=os.cpu_count(), machine=platform.machine(),
              jax=jax.__version__, batch=args.batch, heads=args.heads,
              head_dim=args.head_dim, chunk=args.chunk)
  os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(dict(meta=meta, rows=rows, targets=tgts), f, indent=1)
  print(f"\nwrote {args.out}")


if __name__ == "__main__":
  main()
