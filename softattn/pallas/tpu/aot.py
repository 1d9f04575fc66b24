"""Compile the fused attention for a TPU topology on a CPU host (AOT).

    ALLOW_MULTIPLE_LIBTPU_LOAD=1 JAX_PLATFORMS=cpu TPU_WORKER_HOSTNAMES=localhost \\
      python -m softattn.pallas.tpu.aot --chip v5e --normalizer softmax --causal

prints one JSON line per configuration: whether Mosaic compiled the forward
and backward kernels (layout or VMEM errors come back as ``error``), and XLA's
cost analysis of the compiled step. The environment must be set before jax
starts (libtpu compiles; the CPU runs nothing), hence a separate process: CI
runs it from ``tests/test_pallas_aot.py``; ``benchmarks/kernels.py`` too.
``ALLOW_MULTIPLE_LIBTPU_LOAD`` lets several such processes share libtpu.
"""

from __future__ import annotations

import argparse
import json
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from softattn import xla_cost

# topology name and chip config of a 2x2 slice per generation (4 devices).
# One single-host 2x2 slice per generation (softattn.topology names).
SLICES = {"v4": "v4-8", "v5e": "v5e-4", "v5p": "v5p-8", "v6e": "v6e-4"}
ENV = {"ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "JAX_PLATFORMS": "cpu",
       "TPU_WORKER_HOSTNAMES": "localhost"}


def mesh_for(chip: str) -> Mesh:
  """A ``("data", "model")`` 2x2 mesh of abstract devices of ``chip``."""
  from softattn import topology  # noqa: PLC0415
  devices = topology.abstract_devices(SLICES[chip])
  return Mesh(np.asarray(devices).reshape(2, 2), ("data", "model"))


def step(normalizer, implementation, causal, key_mask, backward=True):
  """``(q, k, v, mask, params) -> out`` or its value and gradients."""
  from softattn import dot_product_attention  # noqa: PLC0415

  def loss(q, k, v, mask, params):
    out = dot_product_attention(
        q, k, v, normalizer=normalizer, normalizer_params=params,
        mask=mask if key_mask else None, is_causal=causal,
        implementation=implementation)
    return jnp.sum(out.astype(jnp.float32))

  if not backward:
    return loss
  return jax.value_and_grad(loss, argnums=(0, 1, 2, 4))


def kernel_operand_dtypes(hlo_text: str) -> list[str]:
  """The element types of the ``[B, L, H*D]`` operands (q, k, v, dO) of
  the Mosaic kernels in an optimized HLO: what the kernels read."""
  found = set()
  for line in hlo_text.splitlines():
    if 'custom_call_target="tpu_custom_call"' in line:
      operands = re.search(r"operand_layout_constraints=\{(.*?)\}, \w+=",
                           line)
      found.update(re.findall(r"(\w+)\[\d+,\d+,\d+\]",
                              operands.group(1) if operands else ""))
  return sorted(found)


def compile_step(chip, b, h, length, d, dtype="bfloat16",
                 normalizer="softmax", implementation="pallas", causal=False,
                 key_mask=False, learnable=(), backward=True):
  """Lowers and compiles one step for ``chip``; returns a result dict."""
  mesh = mesh_for(chip)
  act = NamedSharding(mesh, P("data", None, "model", None))
  x = jax.ShapeDtypeStruct((b, length, h, d), jnp.dtype(dtype), sharding=act)
  mask = jax.ShapeDtypeStruct((b, 1, 1, length), jnp.bool_,
                              sharding=NamedSharding(mesh, P("data")))
  params = {k: jax.ShapeDtypeStruct((h, 1, 1), jnp.float32,
                                    sharding=NamedSharding(mesh, P("model")))
            for k in learnable}
  fn = jax.jit(step(normalizer, implementation, causal, key_mask,
                    backward=backward))
  out = dict(chip=chip, b=b, h=h, length=length, d=d, dtype=dtype,
             normalizer=normalizer, implementation=implementation,
             causal=causal, key_mask=key_mask, backward=backward)
  start = time.time()
  try:
    with jax.set_mesh(mesh):
      compiled = fn.lower(x, x, x, mask, params).compile()
  except Exception as e:  # noqa: BLE001  (reported, not hidden)
    out.update(ok=False, error=f"{type(e).__name__}: {str(e)[:1500]}")
    return out
  cost = xla_cost.cost_analysis(compiled)
  mem = compiled.memory_analysis()
  out.update(ok=True, compile_s=round(time.time() - start, 1),
             kernel_operand_dtypes=kernel_operand_dtypes(compiled.as_text()),
             flops=float(cost.get("flops", -1)),
             bytes_accessed=float(cost.get("bytes accessed", -1)),
             temp_bytes=int(getattr(mem, "temp_size_in_bytes", -1)))
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--chip", choices=sorted(SLICES), required=True)
  ap.add_argument("--configs", type=str, default=None,
                  help="JSON list of compile_step keyword dicts")
  ap.add_argument("--normalizer", default="softmax")
  ap.add_argument("--implementation", default="pallas")
  ap.add_argument("--causal", action="store_true")
  ap.add_argument("--b", type=int, default=8)
  ap.add_argument("--h", type=int, default=12)
  ap.add_argument("--length", type=int, default=4096)
  ap.add_argument("--d", type=int, default=128)
  args = ap.parse_args(argv)
  configs = json.loads(args.configs) if args.configs else [dict(
      normalizer=args.normalizer, implementation=args.implementation,
      causal=args.causal, b=args.b, h=args.h, length=args.length, d=args.d)]
  for cfg in configs:
    cfg = {"b": 8, "h": 12, "length": 4096, "d": 128, **cfg}
    print(json.dumps(compile_step(args.chip, **cfg)), flush=True)


if __name__ == "__main__":
  main()
