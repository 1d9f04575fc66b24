"""Forward kernels: per-row score statistics, then the fused attention pass.

Both run over the grid ``(B, H/hp, q blocks, k blocks)``; the last axis
streams key blocks (``arbitrary``: a reduction) while the state lives in
VMEM scratch, one slot per head of the block. Arrays are the caller's
``[B, L, H*D]``, unpadded (``common/tile.py`` says how blocks and ragged tails
work). The attention kernel can take a table of tiles to skip, the
threshold streams' weighted pass (``skip.py``); without one it is built as
it always was.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from softattn import modes
from softattn.pallas.common import tile
from softattn.pallas.common.operands import out_dtype
from softattn.pallas.tpu import blocks, skip


def run(cfg: tile.Config, build, *args):
  """``build(interpret)(*args)``, choosing interpret mode by the platform the
  computation is lowered for (Mosaic on TPU, the Pallas interpreter
  elsewhere) unless ``cfg.interpret`` fixes it."""
  if cfg.interpret is not None:
    return build(cfg.interpret)(*args)
  return jax.lax.platform_dependent(
      *args, tpu=lambda *a: build(False)(*a),
      default=lambda *a: build(True)(*a))


def _specs(cfg, rows_width, mask):
  """Specs of (q, k, v, rows[, mask]) over the grid (B, H/hp, q blocks,
  k blocks)."""
  specs = [tile.seq_spec(cfg, cfg.bq, cfg.d, axis=2),
           tile.seq_spec(cfg, cfg.bk, cfg.d, axis=3),
           tile.seq_spec(cfg, cfg.bk, cfg.dv, axis=3),
           tile.row_spec(cfg, rows_width, q_axis=2)]
  if mask is not None:
    specs.append(tile.mask_spec(cfg, mask.shape, k_axis=3))
  return specs


def grid(cfg, b, h):
  return (b, h // cfg.hp, pl.cdiv(cfg.lq, cfg.bq), pl.cdiv(cfg.lk, cfg.bk))


def _qkv(cfg, q_ref, k_ref, v_ref, h, qi, kj):
  """Head ``h``'s q, k, v blocks with ragged tails zeroed."""
  q = tile.load(q_ref, h, cfg.d, qi * cfg.bq, cfg.lq, cfg.ragged_q)
  k = tile.load(k_ref, h, cfg.d, kj * cfg.bk, cfg.lk, cfg.ragged_k)
  v = None if v_ref is None else tile.load(v_ref, h, cfg.dv, kj * cfg.bk,
                                           cfg.lk, cfg.ragged_k)
  return q, k, v


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
    for h in range(cfg.hp):
      q, k, _ = _qkv(cfg, q_ref, k_ref, None, h, qi, kj)
      s, valid = tile.scores(cfg, qi, kj, q, k, tile.mask_row(cfg, mask_ref, h))
      nb = jnp.sum(valid.astype(jnp.float32), axis=-1, keepdims=True)
      mb = jnp.sum(s, axis=-1, keepdims=True) / jnp.maximum(nb, 1.0)
      c = jnp.where(valid, s - mb, 0.0)
      m2b = jnp.sum(c * c, axis=-1, keepdims=True)
      na, ma = n_sc[h], mean_sc[h]
      n = na + nb
      delta = mb - ma
      mean_sc[h] = ma + delta * (nb / jnp.maximum(n, 1.0))
      m2_sc[h] = m2_sc[h] + m2b + delta * delta * (na * nb / jnp.maximum(n, 1.0))
      n_sc[h] = n

  @pl.when(kj == pl.num_programs(3) - 1)
  def _():
    for h in range(cfg.hp):
      out_ref[h, :, 0:1] = mean_sc[h]
      out_ref[h, :, 1:2] = m2_sc[h] / jnp.maximum(n_sc[h], 1.0)


def moments(cfg: tile.Config, q, k, mask):
  """``[B, H, Lq, 2]`` (mean, biased var) of the valid scores of each row;
  ``q``, ``k``: ``[B, L, H*D]``."""
  b, h = q.shape[0], q.shape[2] // cfg.d
  specs = _specs(cfg, 1, mask)
  specs = specs[:2] + specs[4:]  # q, k (and the mask): no values, no rows
  args = (q, k) + (() if mask is None else (mask,))

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_stats_kernel, cfg),
        grid=grid(cfg, b, h),
        in_specs=specs,
        out_specs=tile.row_spec(cfg, 2, q_axis=2),
        out_shape=jax.ShapeDtypeStruct((b, h, cfg.lq, 2), jnp.float32),
        scratch_shapes=[pltpu.VMEM((cfg.hp, cfg.bq, 1), jnp.float32)] * 3,
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=blocks.cost_estimate(
            "stats", b, h, cfg.lq, cfg.lk, cfg.d, 0, q.dtype.itemsize,
            cfg.causal),
        interpret=interpret, name="softattn_stats")
  return run(cfg, build, *args)


def rows(cfg: tile.Config, q, k, nrow, prow, kmask):
  """The per-row inputs ``[B, H, Lq, R]`` (``tile.Config.row_names``): the
  count, the moments when the normalizer ``needs`` them, array parameters."""
  parts = [nrow]
  if cfg.moments:
    parts.append(moments(cfg, q, k, kmask))
  if prow is not None:
    parts.append(prow)
  return jnp.concatenate(parts, axis=-1)


# -- attention ------------------------------------------------------------------
def _forward_kernel(cfg, skipping, *refs):
  table_ref, (q_ref, k_ref, v_ref, rows_ref, *refs) = skip.split(skipping,
                                                                 refs)
  mask_ref = refs[0] if cfg.has_mask else None
  o_ref, res_ref, m_sc, l_sc, acc_sc = refs[-5:]
  qi, kj = pl.program_id(2), pl.program_id(3)

  @pl.when(kj == 0)
  def _():
    m0, l0, acc0 = modes.init(cfg.mode, (cfg.bq,), cfg.dv, jnp.float32)
    for h in range(cfg.hp):
      m_sc[h], l_sc[h], acc_sc[h] = m0, l0, acc0

  @pl.when(skip.computes(tile.needed(cfg, qi, kj), table_ref))
  def _():
    for h in range(cfg.hp):
      q, k, v = _qkv(cfg, q_ref, k_ref, v_ref, h, qi, kj)
      s, valid = tile.scores(cfg, qi, kj, q, k, tile.mask_row(cfg, mask_ref, h))
      t = tile.transform(cfg, s, tile.row_values(cfg, rows_ref[h]))
      carry = (m_sc[h], l_sc[h], acc_sc[h])
      m_sc[h], l_sc[h], acc_sc[h] = modes.update(cfg.mode, carry, t, valid, v)

  @pl.when(kj == pl.num_programs(3) - 1)
  def _():
    for h in range(cfg.hp):
      scalar = tile.scalar(cfg, tile.row_values(cfg, rows_ref[h]))
      out, res_a, res_b = modes.output(cfg.mode, (m_sc[h], l_sc[h], acc_sc[h]),
                                       scalar)
      o_ref[:, pl.ds(h * cfg.dv, cfg.dv)] = out.astype(o_ref.dtype)
      res_ref[h, :, 0:1] = res_a
      res_ref[h, :, 1:2] = res_b


def attention(cfg: tile.Config, q, k, v, rows, mask, table=None):
  """``(out [B, Lq, H*Dv], res [B, H, Lq, 2])``; ``res`` holds the mode's
  per-row residuals (``softattn.modes``) for the backward pass.
  ``table``: which tiles to skip (``skip.py``; the threshold streams'
  weighted pass), ``[B, H/hp, nq, nk]`` int32, or None."""
  b, h = q.shape[0], q.shape[2] // cfg.d
  specs = _specs(cfg, rows.shape[-1], mask)
  args = (q, k, v, rows) + (() if mask is None else (mask,))
  if table is not None:
    args = (table,) + args

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_forward_kernel, cfg, table is not None),
        **skip.call_args(
            table, grid(cfg, b, h), specs,
            [tile.seq_spec(cfg, cfg.bq, cfg.dv, axis=2),
             tile.row_spec(cfg, 2, q_axis=2)],
            [pltpu.VMEM((cfg.hp, cfg.bq, 1), jnp.float32),
             pltpu.VMEM((cfg.hp, cfg.bq, 1), jnp.float32),
             pltpu.VMEM((cfg.hp, cfg.bq, cfg.dv), jnp.float32)]),
        out_shape=[jax.ShapeDtypeStruct((b, cfg.lq, h * cfg.dv),
                                        out_dtype(cfg, v.dtype)),
                   jax.ShapeDtypeStruct((b, h, cfg.lq, 2), jnp.float32)],
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=blocks.cost_estimate(
            "forward", b, h, cfg.lq, cfg.lk, cfg.d, cfg.dv, q.dtype.itemsize,
            cfg.causal, pv_passes=modes.pv_passes(cfg.mode, v.dtype),
            out_itemsize=jnp.dtype(out_dtype(cfg, v.dtype)).itemsize),
        interpret=interpret, name="softattn_forward")
  return run(cfg, build, *args)
