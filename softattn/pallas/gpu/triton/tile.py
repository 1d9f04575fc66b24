"""What the GPU (Triton) kernels share: block sizes, masked loads and stores,
the per-tile gradient, and which normalizers the Triton lowering takes.

The GPU kernels compute the same tiles as the TPU ones (``tile.scores``,
``tile.transform`` and the mode table ``softattn.modes``), but Triton has no
VMEM scratch carried across grid steps: each program owns one (batch, head,
query block) -- or key block in the dK/dV kernel -- and streams the other
axis with ``lax.fori_loop`` inside the kernel, carrying the mode's state
``(m, l, acc)`` in registers (the FlashAttention-2 structure, Dao 2023).

Layout: the caller's ``[B, L, H, D]`` arrays are read in place, one
``[L, D]`` head slice per program (``BlockSpec((None, L, None, D))``); a
block of rows is a masked load of ``pl.ds(start, block)``: rows past the true
length load as 0 and are stored back masked, so lengths are never padded
(``plgpu.load``/``plgpu.store`` masks; the interpreter pads its own copy to
avoid ``dynamic_slice`` clamping). Per-row arrays are ``[B, H, R, Lq]`` f32,
one contiguous ``[bq]`` vector per column.
"""

from __future__ import annotations

import functools

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from softattn.modes import MODES
from softattn.pallas.common import tile
# The key blocks a query block streams, shared with the other GPU backend.
from softattn.pallas.common.tile import k_blocks, q_first  # noqa: F401

# The block rule (``block_sizes``). Triton tiles are powers of two and its
# ``tl.dot`` wants every dimension >= 16 -- the head dims too: on an H200,
# bf16 kernels with head dim 8 compiled and ran but returned wrong outputs
# (relative error 1.35; f32 ran right), hence ``gpu.unsupported_reason``.
#
# Blocks for 2-byte inputs (bf16/f16) at D <= 128: 128 x 128 in both
# kernels, measured on an H200 (``benchmarks/README.md``, "Fused GPU
# kernels"): at L = 4096, D = 128 the forward+backward took 8.5 ms against
# 13.4 ms with the first rule's (128, 64) forward and (64, 64) backward
# blocks; (64, 64), (64, 128) and (128, 32) were slower. Measured at D = 128
# only; D = 64 takes the same tiles (half the registers and shared memory).
# float32 (tiles of twice the bytes) and D = 256 keep the untimed starting
# points of the Triton fused attention tutorial. Launch parameters:
# ``compiler_params`` and ``forward_stages``.
MIN_BLOCK = 16
FORWARD_BLOCKS = {64: (128, 64), 128: (128, 64), 256: (64, 32)}
BACKWARD_BLOCKS = {64: (64, 64), 128: (64, 64), 256: (32, 32)}
MEASURED_16BIT = {64: (128, 128), 128: (128, 128)}


def is_pow2(n: int) -> bool:
  return n > 0 and n & (n - 1) == 0


def _fit(block: int, length: int) -> int:
  """``block``, or the smallest power of two >= ``length`` (and >= 16) when
  the sequence is shorter: one block, its tail masked."""
  return min(block, max(MIN_BLOCK, pl.next_power_of_2(length)))


def block_sizes(lq: int, lk: int, d: int, kernel: str = "forward",
                dtype=jnp.bfloat16):
  """``(bq, bk)`` of the GPU kernels for head dim ``d`` and input ``dtype``
  (the module rule)."""
  table = FORWARD_BLOCKS if kernel == "forward" else BACKWARD_BLOCKS
  if jnp.dtype(dtype).itemsize == 2:
    table = {**table, **MEASURED_16BIT}
  bq, bk = table[min((k for k in table if k >= d), default=max(table))]
  return _fit(bq, lq), _fit(bk, lk)


# Shared memory one Triton program may take on Hopper (sm_90: H100, H200),
# the limit Triton reported on an H200.
HOPPER_SMEM = 232448


def compiler_params(d: int, num_stages: int = 2):
  """Triton launch parameters: 4 warps up to D = 64, 8 above (as jax's
  reference attention kernel); two pipeline stages unless told more."""
  return plgpu.CompilerParams(num_warps=4 if d <= 64 else 8,
                              num_stages=num_stages)


@functools.cache
def _device_smem() -> int:
  """``HOPPER_SMEM`` on a Hopper GPU, else 0 (no GPU, or one whose limit
  nobody measured here: nothing extra is assumed to fit)."""
  try:
    dev = jax.devices("gpu")[0]
  except RuntimeError:
    return 0
  cc = str(getattr(dev, "compute_capability", ""))
  return HOPPER_SMEM if cc.startswith("9.") else 0


def forward_stages(cfg: tile.Config, dtype, smem: int | None = None) -> int:
  """Pipeline stages of the forward attention kernel: 3 where three copies
  of a key block and its value block plus the query block fit ``smem``
  bytes (None: the device's, ``_device_smem``), else 2.

  Measured on an H200 (``benchmarks/README.md``, "Fused GPU kernels"): at
  bf16, D = 128, 128 x 128 blocks, 8 warps, L = 4096, three stages took the
  forward from 1.49 to 1.15 ms (relu_seqlen) and 1.99 to 1.64 ms (softmax);
  four asked for 294,912 bytes (the estimate below, exactly) and did not
  launch, nor did the backward kernels at three. The backward keeps 2.
  """
  smem = _device_smem() if smem is None else smem
  size = jnp.dtype(dtype).itemsize
  need = size * (3 * cfg.bk * (cfg.d + cfg.dv) + cfg.bq * cfg.d)
  return 3 if need <= smem else 2


def load_rows(ref, start, size: int, length: int, ragged: bool):
  """Rows ``start .. start+size`` of a ``[L, width]`` ref; rows past
  ``length`` load as 0 (they must add nothing to a matmul)."""
  if not ragged:
    return ref[pl.ds(start, size), :]
  pos = start + jnp.arange(size)
  return plgpu.load(ref.at[pl.ds(start, size), :],
                    mask=(pos < length)[:, None], other=0)


def store_rows(ref, start, value, length: int, ragged: bool):
  size = value.shape[0]
  if not ragged:
    ref[pl.ds(start, size), :] = value
    return
  pos = start + jnp.arange(size)
  plgpu.store(ref.at[pl.ds(start, size), :], value,
              mask=(pos < length)[:, None])


def load_col(ref, i: int, start, size: int, length: int, ragged: bool):
  """``[size, 1]`` column ``i`` of a ``[R, L]`` per-row ref (read as a
  ``[1, size]`` row: the interpreter's store rule takes slices only)."""
  at = ref.at[pl.ds(i, 1), pl.ds(start, size)]
  if not ragged:
    x = at[...]
  else:
    pos = start + jnp.arange(size)
    x = plgpu.load(at, mask=(pos < length)[None, :], other=0)
  return x.reshape(size, 1)


def store_col(ref, i: int, start, value, length: int, ragged: bool):
  size = value.shape[0]
  at, value = ref.at[pl.ds(i, 1), pl.ds(start, size)], value.reshape(1, size)
  if not ragged:
    at[...] = value
    return
  pos = start + jnp.arange(size)
  plgpu.store(at, value, mask=(pos < length)[None, :])


def mask_row(cfg: tile.Config, mask_ref, kj):
  """The ``[1, bk]`` key-mask row of key block ``kj``, or None."""
  if mask_ref is None:
    return None
  pos = kj * cfg.bk + jnp.arange(cfg.bk)
  row = plgpu.load(mask_ref.at[pl.ds(kj * cfg.bk, cfg.bk)],
                   mask=pos < cfg.lk, other=0)
  return row[None, :]


def row_values(cfg: tile.Config, rows_ref, qi):
  """``{name: [bq, 1]}`` of query block ``qi`` from a ``[R, Lq]`` ref."""
  return {name: load_col(rows_ref, i, qi * cfg.bq, cfg.bq, cfg.lq,
                         cfg.ragged_q)
          for i, name in enumerate(cfg.row_names)}


def tile_grads(cfg: tile.Config, qi, kj, q, k, v, do, mrow, rv, brows, drows):
  """``(w, ds, row_cotangents)`` on one tile: the mode's ``grad`` gives the
  weights and ``dt``, ``jax.vjp`` of the declaration's transform gives
  ``ds`` and the row columns' cotangents (as ``tpu/backward.py`` on TPU, on
  loaded values instead of refs). ``brows``: ``(res_a, res_b, di)``;
  ``drows``: ``(dmean, dvar)`` of moments normalizers, or None."""
  s, valid, slope = tile.scores(cfg, qi, kj, q, k, mrow, with_slope=True)
  names = cfg.diff_names

  def t_of(s, *cols):
    return tile.transform(cfg, s, {**rv, **dict(zip(names, cols))})

  t, vjp = jax.vjp(t_of, s, *[rv[n] for n in names])
  dp = jax.lax.dot_general(do, v, tile.NT, preferred_element_type=jnp.float32)
  w, dt = MODES[cfg.mode].grad(t, valid, dp, *brows)
  ds, *dcols = vjp(dt)
  if drows is not None:  # the statistics' own dependence on s
    dmean, dvar = drows
    ds = ds + (dmean + 2.0 * dvar * (s - rv["mean"])) / jnp.maximum(rv["n"],
                                                                    1.0)
  if slope is not None:  # ds is dL/d(capped s) so far: through the cap
    ds = ds * slope
  return jnp.where(valid, w, 0.0), jnp.where(valid, ds, 0.0), dcols


# -- which normalizers the Triton lowering takes -------------------------------
def _triton_rules():
  from jax._src.pallas.triton import lowering  # noqa: PLC0415
  return lowering.triton_lowering_rules


def _primitives(jaxpr):
  for eqn in jaxpr.eqns:
    yield eqn.primitive
    for sub in jex_core.jaxprs_in_params(eqn.params):
      yield from _primitives(sub)


def missing_primitives(cfg: tile.Config) -> tuple[str, ...]:
  """Primitives of one tile's forward and backward math (transform, its VJP,
  the mode's block and grad) that the Triton lowering has no rule for, e.g.
  ``erf`` (Mega's laplace, GELU without the tanh approximation)."""
  shape, col = (cfg.bq, cfg.bk), (cfg.bq, 1)
  rv = {n: jax.ShapeDtypeStruct(col, jnp.float32) for n in cfg.row_names}

  def tile_math(s, rv):
    valid = s > 0
    rv = dict(rv)
    t, vjp = jax.vjp(lambda s: tile.transform(cfg, s, rv), s)
    spec = MODES[cfg.mode]
    m = jnp.full(col, spec.m0, jnp.float32)
    _, _, e, _ = spec.block(m, t, valid, False)
    spec.finish(m, m, tile.scalar(cfg, rv))
    _, dt = spec.grad(t, valid, s, m, m, m)
    return e, vjp(dt)

  jaxpr = jax.make_jaxpr(tile_math)(
      jax.ShapeDtypeStruct(shape, jnp.float32), rv).jaxpr
  rules = _triton_rules()
  return tuple(sorted({p.name for p in _primitives(jaxpr) if p not in rules}))
