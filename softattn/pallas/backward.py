"""Backward kernels: dK/dV (grid over key blocks, queries streamed) and dQ
with the per-row cotangents (grid over query blocks, keys streamed), as in
FlashAttention-2's backward (Dao 2023, Alg. 2) but generic over the mode.

On a tile, ``modes.Mode.grad`` gives the weights ``w`` and ``dt = dL/dt``;
``jax.vjp`` of the normalizer's own transform then gives ``ds`` and the
row-column cotangents (statistics and array parameters: the VJP of a
``[bq, 1]`` column broadcast over keys is its sum over the tile). So phi' is
never written by hand: each normalizer's transform is differentiated inside
the kernel.

For ``needs == "moments"`` the statistics depend on the scores themselves:
``ds_ij += valid (dmean_i + 2 dvar_i (s_ij - mean_i)) / n_i`` (the VJP of the
mean and biased variance), with ``dmean``/``dvar`` summed over the whole row.
They are known only after a full pass over keys, so the wrapper runs the dQ
kernel twice: first for the row cotangents alone (``with_dq=False``), then
with them (``drows``) for dQ, and gives them to the dK/dV kernel.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from softattn.pallas import blocks, tile
from softattn.pallas.forward import run
from softattn.pallas.modes import MODES


def _tile_grads(cfg, qi, kj, ins):
  """``(w, ds, row_cotangents)`` of one tile (see module docstring), and the
  loaded ``q, k, do`` blocks."""
  q, k, v, do, rows, brows, drows, mask_row = [
      None if r is None else r[...] for r in ins]
  s, valid = tile.scores(cfg, qi, kj, q, k, mask_row)
  rv = tile.row_values(cfg, rows)
  names = cfg.diff_names

  def t_of(s, *cols):
    return tile.transform(cfg, s, {**rv, **dict(zip(names, cols))})

  t, vjp = jax.vjp(t_of, s, *[rv[n] for n in names])
  dp = jax.lax.dot_general(do, v, tile.NT, preferred_element_type=jnp.float32)
  w, dt = MODES[cfg.mode].grad(t, valid, dp, brows[:, 0:1], brows[:, 1:2],
                               brows[:, 2:3])
  ds, *dcols = vjp(dt)
  if drows is not None:  # the statistics' own dependence on s
    dmean, dvar = drows[:, 0:1], drows[:, 1:2]
    ds = ds + (dmean + 2.0 * dvar * (s - rv["mean"])) / jnp.maximum(rv["n"],
                                                                    1.0)
  return w, jnp.where(valid, ds, 0.0), dcols, (q, k, do)


def _unpack(cfg, has_drows, refs):
  """Input refs (q, k, v, do, rows, brows, [drows], [mask]) and the rest."""
  q_ref, k_ref, v_ref, do_ref, rows_ref, brows_ref, *rest = refs
  drows_ref = rest.pop(0) if has_drows else None
  mask_ref = rest.pop(0) if cfg.has_mask else None
  return (q_ref, k_ref, v_ref, do_ref, rows_ref, brows_ref, drows_ref,
          mask_ref), rest


def _dkv_kernel(cfg, has_drows, *refs):
  ins, (dk_ref, dv_ref, dk_sc, dv_sc) = _unpack(cfg, has_drows, refs)
  kj, qi = pl.program_id(2), pl.program_id(3)

  @pl.when(qi == 0)
  def _():
    dk_sc[...] = jnp.zeros_like(dk_sc)
    dv_sc[...] = jnp.zeros_like(dv_sc)

  @pl.when(tile.needed(cfg, qi, kj))
  def _():
    w, ds, _, (q, _, do) = _tile_grads(cfg, qi, kj, ins)
    dv_sc[...] += jax.lax.dot(w.T.astype(do.dtype), do,
                              preferred_element_type=jnp.float32)
    dk_sc[...] += jax.lax.dot(ds.T.astype(q.dtype), q,
                              preferred_element_type=jnp.float32) * cfg.scale

  @pl.when(qi == pl.num_programs(3) - 1)
  def _():
    dk_ref[...] = dk_sc[...].astype(dk_ref.dtype)
    dv_ref[...] = dv_sc[...].astype(dv_ref.dtype)


def _dq_kernel(cfg, with_dq, has_drows, *refs):
  ins, outs = _unpack(cfg, has_drows, refs)
  if with_dq:
    dq_ref, dr_ref, dq_sc, dr_sc = outs
  else:
    (dr_ref, dr_sc), dq_ref, dq_sc = outs, None, None
  qi, kj = pl.program_id(2), pl.program_id(3)

  @pl.when(kj == 0)
  def _():
    dr_sc[...] = jnp.zeros_like(dr_sc)
    if with_dq:
      dq_sc[...] = jnp.zeros_like(dq_sc)

  @pl.when(tile.needed(cfg, qi, kj))
  def _():
    _, ds, dcols, (_, k, _) = _tile_grads(cfg, qi, kj, ins)
    for i, dc in enumerate(dcols):
      dr_sc[:, i:i + 1] += dc
    if with_dq:
      dq_sc[...] += jax.lax.dot(ds.astype(k.dtype), k,
                                preferred_element_type=jnp.float32) * cfg.scale

  @pl.when(kj == pl.num_programs(3) - 1)
  def _():
    dr_ref[...] = dr_sc[...]
    if with_dq:
      dq_ref[...] = dq_sc[...].astype(dq_ref.dtype)


def _in_specs(cfg, q, v, rows, drows, mask, q_axis):
  """Specs of (q, k, v, do, rows, brows, [drows], [mask]); ``q_axis`` is the
  grid axis (2 or 3) walking query blocks, the other walks key blocks."""
  d, dv, r, nd = q.shape[-1], v.shape[-1], rows.shape[-1], _n_diff(cfg)
  pick = lambda i, j: (i, j) if q_axis == 2 else (j, i)  # noqa: E731
  qmap = lambda b, h, i, j: (b, h, pick(i, j)[0], 0)  # noqa: E731
  kmap = lambda b, h, i, j: (b, h, pick(i, j)[1], 0)  # noqa: E731
  specs = [pl.BlockSpec((None, None, cfg.bq, d), qmap),
           pl.BlockSpec((None, None, cfg.bk, d), kmap),
           pl.BlockSpec((None, None, cfg.bk, dv), kmap),
           pl.BlockSpec((None, None, cfg.bq, dv), qmap),
           pl.BlockSpec((None, None, cfg.bq, r), qmap),
           pl.BlockSpec((None, None, cfg.bq, 3), qmap)]
  if drows is not None:
    specs.append(pl.BlockSpec((None, None, cfg.bq, nd), qmap))
  if mask is not None:
    specs.append(tile.mask_spec(cfg, mask.shape, k_axis=5 - q_axis))
  return specs, qmap, kmap


def _n_diff(cfg):
  return max(len(cfg.diff_names), 1)  # one dummy column when there are none


def _args(q, k, v, do, rows, brows, drows, mask):
  return tuple(x for x in (q, k, v, do, rows, brows, drows, mask)
               if x is not None)


def dq_and_rows(cfg, q, k, v, do, rows, brows, drows, mask, with_dq=True):
  """``(dq or None, drows [B, H, Lq, len(diff_names)])``."""
  b, h, lq, d = q.shape
  lk, dv, nd = k.shape[2], v.shape[-1], _n_diff(cfg)
  specs, qmap, _ = _in_specs(cfg, q, v, rows, drows, mask, q_axis=2)
  out_specs = [pl.BlockSpec((None, None, cfg.bq, nd), qmap)]
  out_shape = [jax.ShapeDtypeStruct((b, h, lq, nd), jnp.float32)]
  scratch = [pltpu.VMEM((cfg.bq, nd), jnp.float32)]
  if with_dq:
    out_specs.insert(0, pl.BlockSpec((None, None, cfg.bq, d), qmap))
    out_shape.insert(0, jax.ShapeDtypeStruct(q.shape, q.dtype))
    scratch.insert(0, pltpu.VMEM((cfg.bq, d), jnp.float32))

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_dq_kernel, cfg, with_dq, drows is not None),
        grid=(b, h, lq // cfg.bq, lk // cfg.bk),
        in_specs=specs, out_specs=out_specs, out_shape=out_shape,
        scratch_shapes=scratch,
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=blocks.cost_estimate(
            "dq" if with_dq else "drows", b, h, lq, lk, d, dv,
            q.dtype.itemsize, cfg.causal),
        interpret=interpret, name="softattn_dq" if with_dq else "softattn_drows")
  out = run(cfg, build, *_args(q, k, v, do, rows, brows, drows, mask))
  return (out[0], out[1]) if with_dq else (None, out[0])


def dk_dv(cfg, q, k, v, do, rows, brows, drows, mask):
  """``(dk, dv)`` in the input dtypes."""
  b, h, lq, d = q.shape
  lk, dv = k.shape[2], v.shape[-1]
  specs, _, kmap = _in_specs(cfg, q, v, rows, drows, mask, q_axis=3)

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_dkv_kernel, cfg, drows is not None),
        grid=(b, h, lk // cfg.bk, lq // cfg.bq),
        in_specs=specs,
        out_specs=[pl.BlockSpec((None, None, cfg.bk, d), kmap),
                   pl.BlockSpec((None, None, cfg.bk, dv), kmap)],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype),
                   jax.ShapeDtypeStruct(v.shape, v.dtype)],
        scratch_shapes=[pltpu.VMEM((cfg.bk, d), jnp.float32),
                        pltpu.VMEM((cfg.bk, dv), jnp.float32)],
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=blocks.cost_estimate(
            "dkv", b, h, lq, lk, d, dv, q.dtype.itemsize, cfg.causal),
        interpret=interpret, name="softattn_dkv")
  return run(cfg, build, *_args(q, k, v, do, rows, brows, drows, mask))
