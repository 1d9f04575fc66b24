"""What XLA compiles for the dense and chunked paths: FLOPs, bytes and op
counts per (normalizer, implementation), forward and forward+backward.

    python benchmarks/programs.py --out /tmp/new.json
    python benchmarks/programs.py --out /tmp/old.json    # in a checkout of the old commit
    python benchmarks/programs.py --compare /tmp/old.json /tmp/new.json

A refactor that should not change the numerics or the speed should leave
these equal; unlike wall time on a shared machine, they do not move between
runs. Shapes: B=2, L=256, H=4, D=32, float32, chunk 64 (CPU compile).
"""

from __future__ import annotations

import argparse
import collections
import json
import re

import jax
import jax.numpy as jnp

NORMALIZERS = ["softmax", "relu_seqlen", "sin2_max", "softpick", "normsoftmax",
               "sin_softmax", "scaled"]


def programs(normalizers=NORMALIZERS):
  from softattn import dot_product_attention, xla_cost  # noqa: PLC0415
  out = {}
  q = jax.ShapeDtypeStruct((2, 256, 4, 32), jnp.float32)
  for name in normalizers:
    for impl in ("dense", "chunked"):
      def f(q, k, v, name=name, impl=impl):
        return jnp.sum(dot_product_attention(
            q, k, v, normalizer=name, implementation=impl, chunk_size=64))
      for what, fn in (("fwd", f), ("fwd+bwd", jax.grad(f, argnums=(0, 1, 2)))):
        c = jax.jit(fn).lower(q, q, q).compile()
        ops = collections.Counter(re.findall(r"= \S+ (\w[\w-]*)\(", c.as_text()))
        cost = xla_cost.cost_analysis(c)
        out[f"{name}/{impl}/{what}"] = dict(
            flops=cost.get("flops"), bytes=cost.get("bytes accessed"),
            ops=sum(ops.values()), by_op=dict(ops))
  return out


def compare(old, new):
  lines = ["| program | FLOPs old -> new | bytes old -> new | ops old -> new |",
           "|---|---|---|---|"]
  for key in old:
    a, b = old[key], new[key]
    lines.append(f"| {key} | {a['flops']:.4g} -> {b['flops']:.4g} | "
                 f"{a['bytes']:.4g} -> {b['bytes']:.4g} | {a['ops']} -> {b['ops']} |")
  return "\n".join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--out")
  ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
  args = ap.parse_args(argv)
  if args.compare:
    old, new = (json.load(open(p)) for p in args.compare)
    print(compare(old, new))
    return
  result = programs()
  if args.out:
    with open(args.out, "w") as f:
      json.dump(result, f, indent=1)
  print(json.dumps({k: {x: v[x] for x in ("flops", "bytes", "ops")}
                    for k, v in result.items()}, indent=1))


if __name__ == "__main__":
  main()
