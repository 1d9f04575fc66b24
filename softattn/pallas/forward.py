"""Forward kernels: per-row score statistics, then the fused attention pass.

Both run over the grid ``(B, H, q blocks, k blocks)``; the last axis streams
key blocks (``arbitrary``: a reduction) while the state lives in VMEM scratch.
Arrays are ``[B, H, L, D]``, already padded to whole blocks (``wrapper.py``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from softattn.pallas import blocks, modes, tile
from softattn.pallas.modes import MODES


def run(cfg: tile.Config, build, *args):
  """``build(interpret)(*args)``, choosing interpret mode by the platform the
  computation is lowered for (Mosaic on TPU, the Pallas interpreter
  elsewhere) unless ``cfg.interpret`` fixes it."""
  if cfg.interpret is not None:
    return build(cfg.interpret)(*args)
  return jax.lax.platform_dependent(
      *args, tpu=lambda *a: build(False)(*a),
      default=lambda *a: build(True)(*a))


def _specs(cfg, q, k, v, rows, mask):
  d, dv, r = q.shape[-1], v.shape[-1], rows.shape[-1]
  qmap = lambda b, h, i, j: (b, h, i, 0)  # noqa: E731
  kmap = lambda b, h, i, j: (b, h, j, 0)  # noqa: E731
  specs = [pl.BlockSpec((None, None, cfg.bq, d), qmap),
           pl.BlockSpec((None, None, cfg.bk, d), kmap),
           pl.BlockSpec((None, None, cfg.bk, dv), kmap),
           pl.BlockSpec((None, None, cfg.bq, r), qmap)]
  if mask is not None:
    specs.append(tile.mask_spec(cfg, mask.shape, k_axis=3))
  return specs, qmap


# -- statistics: n, mean, biased variance over valid keys (Chan's merge) ------
def _stats_kernel(cfg, q_ref, k_ref, *refs):
  mask_ref = refs[0] if cfg.has_mask else None
  out_ref, n_sc, mean_sc, m2_sc = refs[-4:]
  qi, kj = pl.program_id(2), pl.program_id(3)

  @pl.when(kj == 0)
  def _():
    for sc in (n_sc, mean_sc, m2_sc):
      sc[...] = jnp.zeros_like(sc)

  @pl.when(tile.needed(cfg, qi, kj))
  def _():
    s, valid = tile.scores(cfg, qi, kj, q_ref[...], k_ref[...],
                           None if mask_ref is None else mask_ref[...])
    nb = jnp.sum(valid.astype(jnp.float32), axis=-1, keepdims=True)
    mb = jnp.sum(s, axis=-1, keepdims=True) / jnp.maximum(nb, 1.0)
    c = jnp.where(valid, s - mb, 0.0)
    m2b = jnp.sum(c * c, axis=-1, keepdims=True)
    na, ma = n_sc[...], mean_sc[...]
    n = na + nb
    delta = mb - ma
    mean_sc[...] = ma + delta * (nb / jnp.maximum(n, 1.0))
    m2_sc[...] = m2_sc[...] + m2b + delta * delta * (na * nb / jnp.maximum(n, 1.0))
    n_sc[...] = n

  @pl.when(kj == pl.num_programs(3) - 1)
  def _():
    out_ref[:, 0:1] = mean_sc[...]
    out_ref[:, 1:2] = m2_sc[...] / jnp.maximum(n_sc[...], 1.0)


def moments(cfg: tile.Config, q, k, mask):
  """``[B, H, Lq, 2]`` (mean, biased var) of the valid scores of each row."""
  b, h, lq, d = q.shape
  specs, qmap = _specs(cfg, q, k, k, k[..., :1], mask)
  specs = specs[:2] + specs[4:]  # q, k (and the mask): no values, no rows
  args = (q, k) + (() if mask is None else (mask,))

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_stats_kernel, cfg),
        grid=(b, h, lq // cfg.bq, k.shape[2] // cfg.bk),
        in_specs=specs,
        out_specs=pl.BlockSpec((None, None, cfg.bq, 2), qmap),
        out_shape=jax.ShapeDtypeStruct((b, h, lq, 2), jnp.float32),
        scratch_shapes=[pltpu.VMEM((cfg.bq, 1), jnp.float32)] * 3,
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=blocks.cost_estimate(
            "stats", b, h, lq, k.shape[2], d, 0, q.dtype.itemsize, cfg.causal),
        interpret=interpret, name="softattn_stats")
  return run(cfg, build, *args)


# -- attention ------------------------------------------------------------------
def _forward_kernel(cfg, q_ref, k_ref, v_ref, rows_ref, *refs):
  mask_ref = refs[0] if cfg.has_mask else None
  o_ref, res_ref, m_sc, l_sc, acc_sc = refs[-5:]
  mode = MODES[cfg.mode]
  qi, kj = pl.program_id(2), pl.program_id(3)

  @pl.when(kj == 0)
  def _():
    m0, l0, acc0 = mode.init(cfg.bq, acc_sc.shape[-1])
    m_sc[...], l_sc[...], acc_sc[...] = m0, l0, acc0

  @pl.when(tile.needed(cfg, qi, kj))
  def _():
    s, valid = tile.scores(cfg, qi, kj, q_ref[...], k_ref[...],
                           None if mask_ref is None else mask_ref[...])
    t = tile.transform(cfg, s, tile.row_values(cfg, rows_ref[...]))
    carry = (m_sc[...], l_sc[...], acc_sc[...])
    m_sc[...], l_sc[...], acc_sc[...] = mode.update(carry, t, valid,
                                                    v_ref[...])

  @pl.when(kj == pl.num_programs(3) - 1)
  def _():
    out, res_a, res_b = mode.finish((m_sc[...], l_sc[...], acc_sc[...]),
                                    cfg.eps)
    o_ref[...] = out.astype(o_ref.dtype)
    res_ref[:, 0:1] = res_a
    res_ref[:, 1:2] = res_b


def attention(cfg: tile.Config, q, k, v, rows, mask):
  """``(out [B, H, Lq, Dv], res [B, H, Lq, 2])``; ``res`` holds the mode's
  per-row residuals (``modes.py``) for the backward pass."""
  b, h, lq, d = q.shape
  dv = v.shape[-1]
  specs, qmap = _specs(cfg, q, k, v, rows, mask)
  args = (q, k, v, rows) + (() if mask is None else (mask,))

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_forward_kernel, cfg),
        grid=(b, h, lq // cfg.bq, k.shape[2] // cfg.bk),
        in_specs=specs,
        out_specs=[pl.BlockSpec((None, None, cfg.bq, dv), qmap),
                   pl.BlockSpec((None, None, cfg.bq, 2), qmap)],
        out_shape=[jax.ShapeDtypeStruct((b, h, lq, dv), jnp.float32),
                   jax.ShapeDtypeStruct((b, h, lq, 2), jnp.float32)],
        scratch_shapes=[pltpu.VMEM((cfg.bq, 1), jnp.float32),
                        pltpu.VMEM((cfg.bq, 1), jnp.float32),
                        pltpu.VMEM((cfg.bq, dv), jnp.float32)],
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=blocks.cost_estimate(
            "forward", b, h, lq, k.shape[2], d, dv, q.dtype.itemsize,
            cfg.causal, pv_passes=modes.pv_passes(cfg.mode, v.dtype)),
        interpret=interpret, name="softattn_forward")
  return run(cfg, build, *args)
