"""Backward kernels: dK/dV (grid over key blocks, queries streamed) and dQ
with the per-row cotangents (grid over query blocks, keys streamed), as in
FlashAttention-2's backward (Dao 2023, Alg. 2) but generic over the mode.

On a tile, ``softattn.modes.Mode.grad`` gives the weights ``w`` and ``dt = dL/dt``;
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

Both kernels can take a table of tiles to skip (``skip.py``: the threshold
streams' weighted pass, whose dead tiles have ``w = dt = 0``); not with
``drows``, whose term is not 0 on a dead tile.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from softattn.modes import MODES
from softattn.pallas.common import operands, tile
from softattn.pallas.tpu import blocks, skip
from softattn.pallas.tpu.forward import run


def _mode_grad(cfg, brows, t, valid, dp):
  """``(w, dt, None)`` by the mode's rule from the forward's residual rows
  ``brows`` (``res_a, res_b, di``)."""
  w, dt = MODES[cfg.mode].grad(t, valid, dp, brows[:, 0:1], brows[:, 1:2],
                               brows[:, 2:3])
  return w, dt, None


def _tile_grads(cfg, qi, kj, ins, h, weights_grad=None):
  """``(w, ds, row_cotangents)`` of head ``h`` on one tile (see module
  docstring), its loaded ``q, k, do`` blocks (ragged tails zeroed) and what
  else ``weights_grad(t, valid, dp) -> (w, dt, extra)`` returned (default:
  the mode's rule, ``_mode_grad``; stick-breaking's carries, ``stick.py``)."""
  q_ref, k_ref, v_ref, do_ref, rows_ref, brows_ref, drows_ref, mask_ref = ins
  q0, k0 = qi * cfg.bq, kj * cfg.bk
  q = tile.load(q_ref, h, cfg.d, q0, cfg.lq, cfg.ragged_q)
  do = tile.load(do_ref, h, cfg.dv, q0, cfg.lq, cfg.ragged_q)
  k = tile.load(k_ref, h, cfg.d, k0, cfg.lk, cfg.ragged_k)
  v = tile.load(v_ref, h, cfg.dv, k0, cfg.lk, cfg.ragged_k)
  rows = rows_ref[h]
  s, valid, slope = tile.scores(cfg, qi, kj, q, k,
                                tile.mask_row(cfg, mask_ref, h),
                                with_slope=True)
  rv = tile.row_values(cfg, rows)
  names = cfg.diff_names

  def t_of(s, *cols):
    return tile.transform(cfg, s, {**rv, **dict(zip(names, cols))})

  t, vjp = jax.vjp(t_of, s, *[rv[n] for n in names])
  dp = jax.lax.dot_general(do, v, tile.NT, preferred_element_type=jnp.float32)
  if weights_grad is None:
    weights_grad = functools.partial(_mode_grad, cfg, brows_ref[h])
  w, dt, extra = weights_grad(t, valid, dp)
  ds, *dcols = vjp(dt)
  if drows_ref is not None:  # the statistics' own dependence on s
    drows = drows_ref[h]
    dmean, dvar = drows[:, 0:1], drows[:, 1:2]
    ds = ds + (dmean + 2.0 * dvar * (s - rv["mean"])) / jnp.maximum(rv["n"],
                                                                    1.0)
  if slope is not None:  # ds is dL/d(capped s) so far: through the cap
    ds = ds * slope
  # Rows past the true length (a ragged block's tail) read garbage row
  # statistics, so w can be NaN there even where t was masked: zero it
  # before it meets dO in dV = W^T dO.
  return (jnp.where(valid, w, 0.0), jnp.where(valid, ds, 0.0), dcols,
          (q, k, do), extra)


def _dkv_kernel(cfg, has_drows, grad_of, skipping, *refs):
  table_ref, refs = skip.split(skipping, refs)
  ins, (dk_ref, dv_ref, dk_sc, dv_sc) = operands.unpack(cfg, has_drows, refs)
  kj, qi = pl.program_id(2), pl.program_id(3)

  @pl.when(qi == 0)
  def _():
    dk_sc[...] = jnp.zeros_like(dk_sc)
    dv_sc[...] = jnp.zeros_like(dv_sc)

  @pl.when(skip.computes(tile.needed(cfg, qi, kj), table_ref))
  def _():
    for h in range(cfg.hp):
      wg = None if grad_of is None else grad_of(ins[5][h], kj)
      w, ds, _, (q, _, do), _ = _tile_grads(cfg, qi, kj, ins, h, wg)
      dv_sc[h] += jax.lax.dot(w.T.astype(do.dtype), do,
                              preferred_element_type=jnp.float32)
      dk_sc[h] += jax.lax.dot(ds.T.astype(q.dtype), q,
                              preferred_element_type=jnp.float32) * cfg.scale

  @pl.when(qi == pl.num_programs(3) - 1)
  def _():
    for h in range(cfg.hp):
      dk_ref[:, pl.ds(h * cfg.d, cfg.d)] = dk_sc[h].astype(dk_ref.dtype)
      dv_ref[:, pl.ds(h * cfg.dv, cfg.dv)] = dv_sc[h].astype(dv_ref.dtype)


def _dq_kernel(cfg, with_dq, has_drows, skipping, *refs):
  table_ref, refs = skip.split(skipping, refs)
  ins, outs = operands.unpack(cfg, has_drows, refs)
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

  @pl.when(skip.computes(tile.needed(cfg, qi, kj), table_ref))
  def _():
    for h in range(cfg.hp):
      _, ds, dcols, (_, k, _), _ = _tile_grads(cfg, qi, kj, ins, h)
      for i, dc in enumerate(dcols):
        dr_sc[h, :, i:i + 1] += dc
      add_dq(cfg, dq_sc, h, ds, k)

  store_dq(cfg, kj, dr_ref, dr_sc, dq_ref, dq_sc)


def add_dq(cfg, dq_sc, h, ds, k):
  """``dQ_h += scale dS K`` on one tile, into head ``h``'s f32 scratch
  (nothing when ``dq_sc`` is None: the pass for the row cotangents alone).
  The dQ kernels here and in ``stick.py`` share it and ``store_dq``."""
  if dq_sc is not None:
    dq_sc[h] += jax.lax.dot(ds.astype(k.dtype), k,
                            preferred_element_type=jnp.float32) * cfg.scale


def store_dq(cfg, kj, dr_ref, dr_sc, dq_ref, dq_sc):
  """After the last key block ``kj``: the row cotangents and (unless
  ``dq_ref`` is None) each head's dQ, in the output's dtype."""
  @pl.when(kj == pl.num_programs(3) - 1)
  def _():
    dr_ref[...] = dr_sc[...]
    if dq_ref is not None:
      for h in range(cfg.hp):
        dq_ref[:, pl.ds(h * cfg.d, cfg.d)] = dq_sc[h].astype(dq_ref.dtype)


def _in_specs(cfg, rows, brows, drows, mask, q_axis):
  """Specs of (q, k, v, do, rows, brows, [drows], [mask]); ``q_axis`` is the
  grid axis (2 or 3) walking query blocks, the other walks key blocks."""
  k_axis = 5 - q_axis
  specs = [tile.seq_spec(cfg, cfg.bq, cfg.d, q_axis),
           tile.seq_spec(cfg, cfg.bk, cfg.d, k_axis),
           tile.seq_spec(cfg, cfg.bk, cfg.dv, k_axis),
           tile.seq_spec(cfg, cfg.bq, cfg.dv, q_axis),
           tile.row_spec(cfg, rows.shape[-1], q_axis),
           tile.row_spec(cfg, brows.shape[-1], q_axis)]
  if drows is not None:
    specs.append(tile.row_spec(cfg, operands.n_diff(cfg), q_axis))
  if mask is not None:
    specs.append(tile.mask_spec(cfg, mask.shape, k_axis=k_axis))
  return specs


def _args(q, k, v, do, rows, brows, drows, mask, table=None):
  """The kernels' arguments: the skip table first when there is one."""
  return tuple(x for x in (table, q, k, v, do, rows, brows, drows, mask)
               if x is not None)


def _grid(cfg, b, h, q_axis):
  nq, nk = pl.cdiv(cfg.lq, cfg.bq), pl.cdiv(cfg.lk, cfg.bk)
  return (b, h // cfg.hp) + ((nq, nk) if q_axis == 2 else (nk, nq))


def dq_and_rows(cfg, q, k, v, do, rows, brows, drows, mask, with_dq=True,
                table=None):
  """``(dq [B, Lq, H*D] or None, drows [B, H, Lq, len(diff_names)])``;
  ``table``: the tiles to skip (``skip.py``), by query block."""
  b, h = q.shape[0], q.shape[2] // cfg.d
  nd = operands.n_diff(cfg)
  specs = _in_specs(cfg, rows, brows, drows, mask, q_axis=2)
  out_specs = [tile.row_spec(cfg, nd, q_axis=2)]
  out_shape = [jax.ShapeDtypeStruct((b, h, cfg.lq, nd), jnp.float32)]
  scratch = [pltpu.VMEM((cfg.hp, cfg.bq, nd), jnp.float32)]
  if with_dq:
    out_specs.insert(0, tile.seq_spec(cfg, cfg.bq, cfg.d, axis=2))
    out_shape.insert(0, jax.ShapeDtypeStruct(q.shape, q.dtype))
    scratch.insert(0, pltpu.VMEM((cfg.hp, cfg.bq, cfg.d), jnp.float32))

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_dq_kernel, cfg, with_dq, drows is not None,
                          table is not None),
        **skip.call_args(table, _grid(cfg, b, h, q_axis=2), specs,
                         out_specs, scratch),
        out_shape=out_shape,
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=blocks.cost_estimate(
            "dq" if with_dq else "drows", b, h, cfg.lq, cfg.lk, cfg.d, cfg.dv,
            q.dtype.itemsize, cfg.causal),
        interpret=interpret, name="softattn_dq" if with_dq else "softattn_drows")
  out = run(cfg, build, *_args(q, k, v, do, rows, brows, drows, mask, table))
  return (out[0], out[1]) if with_dq else (None, out[0])


def dk_dv(cfg, q, k, v, do, rows, brows, drows, mask, grad_of=None,
          cost=None, table=None):
  """``(dk, dv)`` in the input dtypes, ``[B, Lk, H*D]`` and ``[B, Lk, H*Dv]``.

  ``grad_of(brows block, key block index) -> weights_grad`` and ``cost``
  replace the mode's rule (``_tile_grads``) and the cost estimate
  (stick-breaking reads its per-block carries from ``brows``: ``stick.py``).
  ``table``: the tiles to skip (``skip.py``), by key block.
  """
  b, h = q.shape[0], q.shape[2] // cfg.d
  specs = _in_specs(cfg, rows, brows, drows, mask, q_axis=3)
  cost = cost or blocks.cost_estimate(
      "dkv", b, h, cfg.lq, cfg.lk, cfg.d, cfg.dv, q.dtype.itemsize, cfg.causal)

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_dkv_kernel, cfg, drows is not None, grad_of,
                          table is not None),
        **skip.call_args(
            table, _grid(cfg, b, h, q_axis=3), specs,
            [tile.seq_spec(cfg, cfg.bk, cfg.d, axis=2),
             tile.seq_spec(cfg, cfg.bk, cfg.dv, axis=2)],
            [pltpu.VMEM((cfg.hp, cfg.bk, cfg.d), jnp.float32),
             pltpu.VMEM((cfg.hp, cfg.bk, cfg.dv), jnp.float32)]),
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype),
                   jax.ShapeDtypeStruct(v.shape, v.dtype)],
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=cost, interpret=interpret, name="softattn_dkv")
  return run(cfg, build, *_args(q, k, v, do, rows, brows, drows, mask, table))
