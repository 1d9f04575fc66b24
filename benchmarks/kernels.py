"""Fused Pallas attention: what can be known without a TPU.

    python benchmarks/kernels.py                 # writes benchmarks/results/kernels.json
    python benchmarks/kernels.py --quick         # fewer compiles

Two tables, both from compiling for TPU topologies on this CPU host (libtpu's
compiler runs; nothing executes on a TPU):

1. VMEM per block configuration: ``softattn.pallas.footprint`` of the
   forward and backward kernels for each ``(bq, bk)`` candidate and head dim
   (bf16), which chips' block budgets it fits, and the pair the block rule
   picks per chip (``softattn/pallas/tpu/blocks.py``).
2. Compiled cost of one forward+backward step (B=8, H=12, D=128, bf16,
   2x2 v5e mesh, per device) for ``pallas`` against the ``chunked`` and
   ``dense`` paths: XLA's FLOPs and bytes accessed (for ``pallas`` the
   kernels' own ``pl.CostEstimate``, which counts matmul FLOPs exactly and
   bytes as a lower bound; XLA cannot look inside Mosaic kernels) and the
   compiled program's HBM temporaries (``memory_analysis``: the [L, L] score
   buffers dense keeps, the blocks chunked keeps).

Hardware timings need a TPU; see ``benchmarks/README.md`` for what was not
measured.
"""

from __future__ import annotations

import os

from softattn.pallas.tpu.aot import ENV

for _k, _v in ENV.items():  # before jax starts: compile for TPU on a CPU host
  os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import json  # noqa: E402

import jax.numpy as jnp  # noqa: E402

from softattn import topology  # noqa: E402
from softattn.pallas.tpu import aot, blocks  # noqa: E402

MIB = 2**20


def vmem_table(head_dims=(64, 128, 256)):
  rows = []
  for d in head_dims:
    chosen = {c: blocks.block_sizes(1 << 14, 1 << 14, d, d, jnp.bfloat16, c)
              for c in topology.CHIPS}
    for bq in blocks.Q_BLOCKS:
      for bk in blocks.K_BLOCKS:
        fwd = blocks.footprint("forward", bq, bk, d, d, 2)
        bwd = blocks.footprint("backward", bq, bk, d, d, 2)
        fits = [c for c in topology.CHIPS if max(fwd, bwd) <= blocks.budget(c)]
        rows.append(dict(d=d, bq=bq, bk=bk, forward_mib=fwd / MIB,
                         backward_mib=bwd / MIB, fits=fits,
                         chosen_by=[c for c, p in chosen.items()
                                    if p == (bq, bk)]))
  return rows


def cost_table(lengths, normalizers, chip="v5e"):
  rows = []
  for length in lengths:
    for name in normalizers:
      for impl in ("pallas", "chunked", "dense"):
        r = aot.compile_step(chip, 8, 12, length, 128, normalizer=name,
                             implementation=impl, causal=False)
        rows.append(r)
        print(f"  compiled {name} {impl} L={length}: "
              f"{'ok' if r['ok'] else r['error'][:200]}", flush=True)
  return rows


def _print_vmem(rows):
  print("\n| D | bq | bk | fwd MiB | bwd MiB | fits budget of | rule picks on |")
  print("|---|---|---|---|---|---|---|")
  for r in rows:
    print(f"| {r['d']} | {r['bq']} | {r['bk']} | {r['forward_mib']:.1f} | "
          f"{r['backward_mib']:.1f} | {', '.join(r['fits']) or '-'} | "
          f"{', '.join(r['chosen_by']) or ''} |")


def _print_cost(rows):
  print("\n| L | normalizer | impl | GFLOP | GB accessed | HBM temp GiB | "
        "status |")
  print("|---|---|---|---|---|---|---|")
  for r in rows:
    if not r["ok"]:
      print(f"| {r['length']} | {r['normalizer']} | {r['implementation']} | "
            f"| | | compile failed: {r['error'][:80]} |")
      continue
    print(f"| {r['length']} | {r['normalizer']} | {r['implementation']} | "
          f"{r['flops'] / 1e9:.0f} | {r['bytes_accessed'] / 1e9:.2f} | "
          f"{r['temp_bytes'] / 2**30:.3f} | ok |")


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--quick", action="store_true")
  ap.add_argument("--out", default="benchmarks/results/kernels.json")
  args = ap.parse_args()
  lengths = [4096] if args.quick else [1024, 4096]
  normalizers = (["softmax"] if args.quick
                 else ["softmax", "sigmoid", "normsoftmax", "sin2_max_shifted"])
  for c in topology.CHIPS:
    print(blocks.describe(c))
  vmem = vmem_table()
  cost = cost_table(lengths, normalizers)
  _print_vmem(vmem)
  _print_cost(cost)
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(dict(vmem=vmem, cost=cost), f, indent=1)
  print(f"\nwrote {args.out}")


if __name__ == "__main__":
  main()
