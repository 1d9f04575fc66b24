"""Block sizes and VMEM budget of the fused kernels, per TPU generation.

The rule (``block_sizes``), written down once:

1. The chip's VMEM capacity per TensorCore and MXU width come from the chip
   table, ``softattn.topology.CHIPS``, which has them as Pallas' own
   ``pltpu.get_tpu_info_for_chip`` does (v4 16 MiB, v5e 128 MiB, v5p 64 MiB,
   v6e 128 MiB). Each kernel asks Mosaic for ``vmem_limit = 3/4`` of it (the
   rest stays for Mosaic's internal scratch), capped at 96 MiB.
2. Our own estimate of a kernel's footprint (``footprint``: double-buffered
   input/output blocks, f32 scratch, lane-padded row vectors and ``TILE_TEMPS``
   live ``[bq, bk]`` f32 temporaries) must fit half of that limit: the
   estimate cannot see every temporary Mosaic materialises for the
   normalizer's elementwise chain, so half is the safety margin.
3. Among ``bq in (512, 256, 128)`` and ``bk in (1024, 512, 256, 128)`` with
   ``bk`` a multiple of the MXU width (128 up to v5, 256 on v6e), take the
   feasible pair with the largest ``bq * bk`` (fewest grid steps, longest
   matmuls), ties to the larger ``bk``; the backward kernels hold more
   temporaries than the forward, so the pair must fit all three.
4. A sequence no longer than a block is one block of its own length (a
   block equal to the whole dimension is always legal); longer ones end in
   a ragged block, masked by position (``common/tile.py``), never padded.

Off TPU (interpret mode on CPU, or a chip this table lacks) the rule runs for
``DEFAULT_CHIP``. ``chunk_size``/``query_chunk_size`` override it.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu

from softattn import topology

DEFAULT_CHIP = "v5e"
VMEM_LIMIT_FRACTION = 0.75
VMEM_LIMIT_CAP = 96 * 2**20
BUDGET_FRACTION = 0.5
Q_BLOCKS = (512, 256, 128)
K_BLOCKS = (1024, 512, 256, 128)
LANES = 128
# Live [bq, bk] f32 temporaries per kernel: forward s, valid, t, e and the
# low-precision copy for the PV matmul; backward adds dp, w, dt, ds and the
# transform's VJP residuals.
TILE_TEMPS = {"forward": 6, "backward": 10}


def vmem_limit(chip_name: str) -> int:
  """Bytes of VMEM each kernel asks Mosaic for on ``chip_name`` (rule 1)."""
  c = topology.chip(chip_name)
  return min(int(c.vmem_bytes * VMEM_LIMIT_FRACTION), VMEM_LIMIT_CAP)


def budget(chip_name: str) -> int:
  """Bytes a kernel's ``footprint`` may take on ``chip_name`` (rule 2)."""
  return int(vmem_limit(chip_name) * BUDGET_FRACTION)


def chip_of_kind(device_kind: str) -> str:
  """Generation name for a ``jax.Device.device_kind`` (``"TPU v5 lite"`` ->
  ``"v5e"``), or ``DEFAULT_CHIP`` when it is not a TPU the chip table knows."""
  try:
    return topology.chip(device_kind).name
  except ValueError:
    return DEFAULT_CHIP


def _lane_pad(n):
  return max(LANES, -(-n // LANES) * LANES)


def footprint(kernel: str, bq: int, bk: int, d: int, dv: int, itemsize: int,
              rows: int = 4, hp: int = 1) -> int:
  """Estimated VMEM bytes of one kernel instance (see the module rule).

  ``kernel``: ``"forward"`` (also the statistics pass, which is smaller) or
  ``"backward"`` (the larger of the dK/dV and dQ kernels). ``hp`` heads per
  block multiply the blocks and the scratch; the ``[bq, bk]`` temporaries
  are one head's (the heads run one after another).
  """
  f32 = 4
  row_vec = bq * _lane_pad(rows) * f32       # a [bq, R] f32 block, lane-padded
  mask = 8 * bk * 4                          # [1, bk] int32, sublane-padded
  if kernel == "forward":
    # The output block counted as f32 (the ratio mode's, the largest).
    blocks = (bq * d + bk * d + bk * dv) * itemsize + bq * dv * f32 + mask
    blocks += 2 * row_vec                    # statistics/params in, residual out
    scratch = bq * dv * f32 + 2 * bq * LANES * f32
  elif kernel == "backward":
    blocks = (bq * d + bk * d + bk * dv + bq * dv) * itemsize + mask
    blocks += (bk * d + bk * dv) * itemsize  # dK, dV (or dQ) out
    blocks += 3 * row_vec                    # rows, residual rows, row grads
    scratch = (bk * d + bk * dv) * f32 + row_vec
  else:
    raise ValueError(f"kernel must be 'forward' or 'backward', got {kernel!r}")
  return hp * (2 * blocks + scratch) + TILE_TEMPS[kernel] * bq * bk * f32


def block_sizes(lq: int, lk: int, d: int, dv: int, dtype,
                chip_name: str = DEFAULT_CHIP, hp: int = 1) -> tuple[int, int]:
  """``(bq, bk)`` by the module rule for one (batch, ``hp`` heads) block."""
  c = topology.chip(chip_name)
  itemsize = jnp.dtype(dtype).itemsize
  best = None
  for bq in Q_BLOCKS:
    for bk in K_BLOCKS:
      if bk % c.mxu_width and bk != min(K_BLOCKS):
        continue
      need = max(footprint(k, bq, bk, d, dv, itemsize, hp=hp)
                 for k in ("forward", "backward"))
      if need > budget(chip_name):
        continue
      if best is None or (bq * bk, bk) > (best[0] * best[1], best[1]):
        best = (bq, bk)
  if best is None:  # nothing fits: the smallest pair, let Mosaic decide
    best = (min(Q_BLOCKS), min(K_BLOCKS))
  bq, bk = best
  # A sequence no longer than a block is one whole-length block (always a
  # legal block shape; no ragged tail).
  return (lq if lq <= bq else bq), (lk if lk <= bk else bk)


def compiler_params(chip_name: str, n_parallel: int = 3):
  """Mosaic parameters: ``n_parallel`` parallel grid axes, then one reduction
  axis (the streamed blocks), and the VMEM limit of the rule."""
  return pltpu.CompilerParams(
      dimension_semantics=("parallel",) * n_parallel + ("arbitrary",),
      vmem_limit_bytes=vmem_limit(chip_name))


# Matmuls per (query, key) pair of each kernel, as contraction widths:
# forward QK^T and PV; the statistics pass QK^T; dQ recomputes QK^T, dO V^T
# and adds dS K; dK/dV recomputes both and adds P^T dO and dS^T Q; the
# row-cotangent pass of moments normalizers QK^T and dO V^T.
KERNEL_MATMULS = {"stats": ("d",), "forward": ("d", "dv"),
                  "dq": ("d", "dv", "d"), "dkv": ("d", "dv", "dv", "d"),
                  "drows": ("d", "dv")}


def cost_estimate(kernel: str, b: int, h: int, lq: int, lk: int, d: int,
                  dv: int, itemsize: int, causal: bool, pv_passes: int = 1,
                  out_itemsize: int | None = None):
  """``pl.CostEstimate`` of one kernel over its whole grid.

  FLOPs: 2 per multiply-add of ``KERNEL_MATMULS``, the forward's PV
  ``pv_passes`` times (2 for the ratio mode in bf16, ``softattn.modes.pv``).
  The forward writes its output in ``out_itemsize`` bytes (the inputs'
  unless given). Transcendentals: one per
  score (exp, sigmoid, sin, log: an estimate, the exact count depends on the
  normalizer). Bytes: each input and output once (a lower bound: K/V blocks
  are re-read once per query block). Causal halves the pairs.
  """
  from jax.experimental import pallas as pl  # noqa: PLC0415
  pairs = b * h * lq * lk // (2 if causal else 1)
  widths = {"d": d, "dv": dv}
  flops = 2 * pairs * sum(widths[w] for w in KERNEL_MATMULS[kernel])
  if kernel == "forward":
    flops += 2 * pairs * dv * (pv_passes - 1)
  out_size = out_itemsize or itemsize
  io = b * h * ((lq * d + lk * d + lk * dv) * itemsize + lq * dv * out_size)
  if kernel in ("dq", "dkv"):
    io += b * h * (lq * d + lk * d + lk * dv) * itemsize  # dO in, grads out
  return pl.CostEstimate(flops=int(flops), transcendentals=int(pairs),
                         bytes_accessed=int(io))


def describe(chip_name: str) -> str:
  c = topology.chip(chip_name)
  return (f"{c.name}: VMEM {c.vmem_bytes / 2**20:.0f} MiB/core, limit "
          f"{vmem_limit(chip_name) / 2**20:.0f} MiB, block budget "
          f"{budget(chip_name) / 2**20:.0f} MiB, MXU {c.mxu_width}")


