"""Non-local heads benchmark: the scaled-NL paper's Table 3 on this machine.

PreResNet-56 with 3 NL blocks in the second stage (16x16 maps, 32 channels,
256 tokens), heads in {0, 1, 2, 4, 8} (0 = no NL block), softmax NL (dense
attention, as the paper's NL block) vs scaled NL (linear path,
``Q (K^T V) / sqrt(n d)``). For each configuration: one jitted SGD-momentum
train step (cross-entropy, BatchNorm updates) on random 32x32 inputs;

* step time: the minimum and the median wall time over ``--steps`` timed
  steps after ``--warmup`` untimed ones, and the median process CPU time.
  All configurations are compiled first and then stepped round robin, so
  that load from other processes on a shared machine hits them alike; the
  minimum is the least disturbed by others. On a loaded shared CPU the
  process CPU time is the steadier measure of the step's own work; the
  comparisons print both;
* peak memory: XLA's buffer assignment for the compiled step
  (``compiled.memory_analysis()``: arguments + outputs + temporaries -
  aliased), i.e. the memory the step needs, independent of the allocator.

Run: ``python benchmarks/nonlocal_heads.py --batch 128`` (paper setting) or a
smaller ``--batch`` on a small CPU; prints one markdown table and the
comparisons Cho et al. claim (scaled NL flat in heads; faster than softmax NL
at 4 heads).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from softattn.models.resnet import PreResNet


def make_step(model, tx):
  def loss_fn(params, batch_stats, x, y):
    logits, upd = model.apply({"params": params, "batch_stats": batch_stats},
                              x, train=True, mutable=["batch_stats"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return loss, upd["batch_stats"]

  def step(params, batch_stats, opt_state, x, y):
    (loss, batch_stats), g = jax.value_and_grad(loss_fn, has_aux=True)(
        params, batch_stats, x, y)
    updates, opt_state = tx.update(g, opt_state, params)
    return optax.apply_updates(params, updates), batch_stats, opt_state, loss

  return jax.jit(step, donate_argnums=(0, 1, 2))


def peak_bytes(compiled) -> float:
  m = compiled.memory_analysis()
  if m is None:
    return float("nan")
  return float(m.argument_size_in_bytes + m.output_size_in_bytes
               + m.temp_size_in_bytes - m.alias_size_in_bytes)


def prepare(heads, normalizer, args):
  """Builds and compiles one configuration; returns its state and a step."""
  nl = None
  if heads:
    impl = "dense" if normalizer == "softmax" else "linear"
    nl = dict(count=3, stage=2, heads=heads, normalizer=normalizer,
              implementation=impl)
  model = PreResNet(depth=args.depth, num_classes=10, nl_blocks=nl)
  rng = np.random.RandomState(0)
  x = jnp.asarray(rng.randn(args.batch, 32, 32, 3), jnp.float32)
  y = jnp.asarray(rng.randint(0, 10, args.batch), jnp.int32)
  v = model.init(jax.random.key(0), x[:2])
  tx = optax.sgd(0.1, momentum=0.9)
  state = [v["params"], v["batch_stats"], tx.init(v["params"])]
  t0 = time.perf_counter()
  compiled = make_step(model, tx).lower(*state, x, y).compile()
  row = dict(heads=heads, normalizer=normalizer,
             mem_mb=peak_bytes(compiled) / 2**20,
             compile_s=time.perf_counter() - t0, wall=[], cpu=[])

  def step():
    w, c = time.perf_counter(), time.process_time()
    *new_state, loss = compiled(*state, x, y)
    loss.block_until_ready()
    state[:] = new_state
    row["wall"].append(time.perf_counter() - w)
    row["cpu"].append(time.process_time() - c)
    if not np.isfinite(float(loss)):
      raise FloatingPointError(f"non-finite loss: heads={heads} {normalizer}")

  return row, step


def growth(rows, normalizer, key):
  by = {r["heads"]: r[key] for r in rows if r["normalizer"] == normalizer}
  if 1 not in by or 8 not in by:
    return None
  return 100.0 * (by[8] / by[1] - 1.0)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--batch", type=int, default=128)
  ap.add_argument("--depth", type=int, default=56)
  ap.add_argument("--heads", default="0,1,2,4,8")
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--warmup", type=int, default=1)
  args = ap.parse_args(argv)
  heads = [int(h) for h in args.heads.split(",")]
  configs = [(h, n) for h in heads
             for n in (["softmax"] if h == 0 else ["softmax", "scaled"])]
  prepared = [prepare(h, n, args) for h, n in configs]
  # Round robin: every configuration sees the same mix of background load.
  for i in range(args.warmup + args.steps):
    for row, step in prepared:
      step()
      if i < args.warmup:
        row["wall"].clear()
        row["cpu"].clear()
  rows = []
  for row, _ in prepared:
    row.update(min_ms=1e3 * min(row["wall"]),
               med_ms=1e3 * statistics.median(row["wall"]),
               cpu_ms=1e3 * statistics.median(row["cpu"]))
    rows.append(row)

  print(f"\nPreResNet-{args.depth} + 3 NL blocks (stage 2), batch "
        f"{args.batch}, 32x32, {jax.devices()[0].platform} "
        f"({jax.device_count()} device, {platform.processor() or 'cpu'}), "
        f"jax {jax.__version__}; {args.steps} timed steps after "
        f"{args.warmup} warm-up\n")
  print("| heads | block | step ms (min) | step ms (median) | CPU ms "
        "(median) | peak MB (XLA) |")
  print("|---:|---|---:|---:|---:|---:|")
  for r in rows:
    name = "none" if r["heads"] == 0 else (
        "NL (softmax, dense)" if r["normalizer"] == "softmax"
        else "scaled NL (linear)")
    print(f"| {r['heads']} | {name} | {r['min_ms']:.0f} | {r['med_ms']:.0f} "
          f"| {r['cpu_ms']:.0f} | {r['mem_mb']:.0f} |")
  print()
  for n in ("scaled", "softmax"):
    t, m = growth(rows, n, "min_ms"), growth(rows, n, "mem_mb")
    c = growth(rows, n, "cpu_ms")
    if t is not None:
      label = "scaled NL" if n == "scaled" else "softmax NL"
      print(f"{label}: 1 -> 8 heads: step time {t:+.1f}% (wall min), "
            f"{c:+.1f}% (CPU median); peak memory {m:+.1f}%")
  four = {r["normalizer"]: r for r in rows if r["heads"] == 4}
  if len(four) == 2:
    s, n = four["scaled"], four["softmax"]
    faster = lambda k: "faster" if s[k] < n[k] else "NOT faster"
    print(f"4 heads: scaled NL vs softmax NL: {s['min_ms']:.0f} vs "
          f"{n['min_ms']:.0f} ms wall min ({faster('min_ms')}), "
          f"{s['cpu_ms']:.0f} vs {n['cpu_ms']:.0f} ms CPU "
          f"({faster('cpu_ms')}), "
          f"{s['mem_mb']:.0f} vs {n['mem_mb']:.0f} MB")


if __name__ == "__main__":
  main()
