"""Where `auto` switches from dense to the fused kernels on TPU: the evidence.

    python benchmarks/auto_rule.py      # writes benchmarks/results/auto_rule.json (~5 min)

Compiles one forward+backward attention step (softmax, B=16, H=12, D=64, no
mask, batch over `data` and heads over `model` of a v5e 2x2 mesh: the
ViT-S/B head shape) with `implementation="dense"` and `"pallas"` at a range
of lengths, with VMEM staging off (`softattn.aot.compile.hbm_traffic` says
why), and prints each program's bound, max(FLOPs / peak, bytes / HBM
bandwidth), per device. For `pallas` XLA cannot see inside the Mosaic
kernels: its FLOPs and bytes come from their `pl.CostEstimate` (matmul FLOPs
exact, bytes each array once: a lower bound that is exact while one query
block covers the sequence, L <= 512 here). `softattn.attention`'s
`AUTO_PALLAS_MIN_SCORES` is set from this table.
"""

from __future__ import annotations

import os

from softattn.pallas.tpu.aot import ENV

for _k, _v in ENV.items():  # before jax starts: compile for TPU on a CPU host
  os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import json  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from softattn import topology, xla_cost  # noqa: E402
from softattn.pallas.tpu import aot  # noqa: E402

LENGTHS = (16, 49, 64, 128, 196, 256, 576, 1024, 4096)


def bound(chip: str, length: int, dtype: str, impl: str, b=16, h=12, d=64):
  """``(bound seconds, flops, bytes)`` per device of one step."""
  c = topology.CHIPS[chip]
  mesh = aot.mesh_for(chip)
  x = jax.ShapeDtypeStruct((b, length, h, d), jnp.dtype(dtype),
                           sharding=NamedSharding(mesh, P("data", None, "model")))
  mask = jax.ShapeDtypeStruct((b, 1, 1, length), jnp.bool_,
                              sharding=NamedSharding(mesh, P("data")))
  fn = jax.jit(aot.step("softmax", impl, False, False))
  with jax.set_mesh(mesh):
    opts = {c.vmem_staging_flag: False} if c.vmem_staging_flag else {}
    compiled = fn.lower(x, x, x, mask, {}).compile(opts)
  cost = xla_cost.cost_analysis(compiled)
  flops, nbytes = float(cost["flops"]), float(cost["bytes accessed"])
  return (max(flops / c.peak_bf16_flops, nbytes / c.hbm_bytes_per_s), flops,
          nbytes)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--chip", default="v5e")
  ap.add_argument("--out", default="benchmarks/results/auto_rule.json")
  args = ap.parse_args()
  rows = []
  print("| L | dtype | dense µs | pallas µs | dense / pallas | cheaper |")
  print("|---|---|---|---|---|---|")
  for dtype in ("bfloat16", "float32"):
    for length in LENGTHS:
      row = dict(chip=args.chip, length=length, dtype=dtype)
      for impl in ("dense", "pallas"):
        t, fl, by = bound(args.chip, length, dtype, impl)
        row.update({f"{impl}_s": t, f"{impl}_flops": fl, f"{impl}_bytes": by})
      rows.append(row)
      ratio = row["dense_s"] / row["pallas_s"]
      print(f"| {length} | {dtype} | {row['dense_s'] * 1e6:.1f} | "
            f"{row['pallas_s'] * 1e6:.1f} | {ratio:.2f} | "
            f"{'pallas' if ratio > 1 else 'dense'} |", flush=True)
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(rows, f, indent=1)
  print(f"\nwrote {args.out}")


if __name__ == "__main__":
  main()
