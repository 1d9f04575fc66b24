"""GPU (Triton) backward kernels: dQ with the per-row cotangents (one program
per query block, keys streamed) and dK/dV (one program per key block,
queries streamed), FlashAttention-2's backward (Dao 2023, Alg. 2) generic
over the mode, as ``tpu/backward.py`` is on TPU.

The tile math is ``gpu_tile.tile_grads`` (the mode's ``grad`` and the VJP of
the declaration's transform). For ``needs == "moments"`` the wrapper runs
the dQ kernel first for the row cotangents alone (``with_dq=False``), then
with them, as on TPU (``tpu/backward.py`` says why).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from softattn.pallas.common.operands import n_diff, unpack
from softattn.pallas.gpu.triton import tile as gpu_tile
from softattn.pallas.gpu.triton.forward import (
    mask_spec, row_spec, run, seq_spec)


def _query_side(cfg, ins, qi):
  """Query block ``qi``'s q, dO, row values, backward rows and drows."""
  q_ref, _, _, do_ref, rows_ref, brows_ref, drows_ref, _ = ins
  q0 = qi * cfg.bq
  q = gpu_tile.load_rows(q_ref, q0, cfg.bq, cfg.lq, cfg.ragged_q)
  do = gpu_tile.load_rows(do_ref, q0, cfg.bq, cfg.lq, cfg.ragged_q)
  rv = gpu_tile.row_values(cfg, rows_ref, qi)
  col = functools.partial(gpu_tile.load_col, start=q0, size=cfg.bq,
                          length=cfg.lq, ragged=cfg.ragged_q)
  brows = tuple(col(brows_ref, i) for i in range(3))
  drows = None if drows_ref is None else (col(drows_ref, 0),
                                          col(drows_ref, 1))
  return q, do, rv, brows, drows


def _key_side(cfg, ins, kj):
  _, k_ref, v_ref, _, _, _, _, mask_ref = ins
  k0 = kj * cfg.bk
  k = gpu_tile.load_rows(k_ref, k0, cfg.bk, cfg.lk, cfg.ragged_k)
  v = gpu_tile.load_rows(v_ref, k0, cfg.bk, cfg.lk, cfg.ragged_k)
  return k, v, gpu_tile.mask_row(cfg, mask_ref, kj)


def _dq_kernel(cfg, with_dq, has_drows, *refs):
  ins, outs = unpack(cfg, has_drows, refs)
  dq_ref, dr_ref = outs if with_dq else (None, outs[0])
  qi = pl.program_id(2)
  q, do, rv, brows, drows = _query_side(cfg, ins, qi)
  nd = n_diff(cfg)

  def body(kj, carry):
    dq, dr = carry
    k, v, mrow = _key_side(cfg, ins, kj)
    _, ds, dcols = gpu_tile.tile_grads(cfg, qi, kj, q, k, v, do, mrow, rv,
                                       brows, drows)
    dr = tuple(a + b for a, b in zip(dr, dcols)) + dr[len(dcols):]
    if with_dq:
      dq = dq + jax.lax.dot(ds.astype(k.dtype), k,
                            preferred_element_type=jnp.float32)
    return dq, dr

  zero = jnp.zeros((cfg.bq, 1), jnp.float32)
  dq0 = jnp.zeros((cfg.bq, cfg.d), jnp.float32) if with_dq else zero
  dq, dr = jax.lax.fori_loop(0, gpu_tile.k_blocks(cfg, qi), body,
                             (dq0, (zero,) * nd))
  q0 = qi * cfg.bq
  for i, x in enumerate(dr):
    gpu_tile.store_col(dr_ref, i, q0, x, cfg.lq, cfg.ragged_q)
  if with_dq:
    gpu_tile.store_rows(dq_ref, q0, (dq * cfg.scale).astype(dq_ref.dtype),
                        cfg.lq, cfg.ragged_q)


def _dkv_kernel(cfg, has_drows, *refs):
  ins, (dk_ref, dv_ref) = unpack(cfg, has_drows, refs)
  kj = pl.program_id(2)
  k, v, mrow = _key_side(cfg, ins, kj)
  tn = (((0,), (0,)), ((), ()))  # contract the query rows: W^T dO, dS^T Q

  def body(qi, carry):
    dk, dv = carry
    q, do, rv, brows, drows = _query_side(cfg, ins, qi)
    w, ds, _ = gpu_tile.tile_grads(cfg, qi, kj, q, k, v, do, mrow, rv, brows,
                                   drows)
    dv = dv + jax.lax.dot_general(w.astype(do.dtype), do, tn,
                                  preferred_element_type=jnp.float32)
    dk = dk + jax.lax.dot_general(ds.astype(q.dtype), q, tn,
                                  preferred_element_type=jnp.float32)
    return dk, dv

  carry = (jnp.zeros((cfg.bk, cfg.d), jnp.float32),
           jnp.zeros((cfg.bk, cfg.dv), jnp.float32))
  dk, dv = jax.lax.fori_loop(gpu_tile.q_first(cfg, kj),
                             pl.cdiv(cfg.lq, cfg.bq), body, carry)
  k0 = kj * cfg.bk
  gpu_tile.store_rows(dk_ref, k0, (dk * cfg.scale).astype(dk_ref.dtype),
                      cfg.lk, cfg.ragged_k)
  gpu_tile.store_rows(dv_ref, k0, dv.astype(dv_ref.dtype), cfg.lk,
                      cfg.ragged_k)


def _in_specs(cfg, rows, drows, mask):
  specs = [seq_spec(cfg.lq, cfg.d), seq_spec(cfg.lk, cfg.d),
           seq_spec(cfg.lk, cfg.dv), seq_spec(cfg.lq, cfg.dv),
           row_spec(rows.shape[2], cfg.lq), row_spec(3, cfg.lq)]
  if drows is not None:
    specs.append(row_spec(drows.shape[2], cfg.lq))
  if mask is not None:
    specs.append(mask_spec(cfg, mask.shape))
  return specs


def _args(*xs):
  return tuple(x for x in xs if x is not None)


def dq_and_rows(cfg, q, k, v, do, rows, brows, drows, mask, with_dq=True):
  """``(dq [B, Lq, H, D] or None, drows [B, H, n_diff, Lq])``."""
  b, _, h, _ = q.shape
  nd = n_diff(cfg)
  out_specs = [row_spec(nd, cfg.lq)]
  out_shape = [jax.ShapeDtypeStruct((b, h, nd, cfg.lq), jnp.float32)]
  if with_dq:
    out_specs.insert(0, seq_spec(cfg.lq, cfg.d))
    out_shape.insert(0, jax.ShapeDtypeStruct(q.shape, q.dtype))

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_dq_kernel, cfg, with_dq, drows is not None),
        grid=(b, h, pl.cdiv(cfg.lq, cfg.bq)),
        in_specs=_in_specs(cfg, rows, drows, mask), out_specs=out_specs,
        out_shape=out_shape, compiler_params=gpu_tile.compiler_params(cfg.d),
        interpret=interpret,
        name="softattn_gpu_dq" if with_dq else "softattn_gpu_drows")
  out = run(cfg, build, *_args(q, k, v, do, rows, brows, drows, mask))
  return (out[0], out[1]) if with_dq else (None, out[0])


def dk_dv(cfg, q, k, v, do, rows, brows, drows, mask):
  """``(dk, dv)`` in the input dtypes: ``[B, Lk, H, D]``, ``[B, Lk, H, Dv]``."""
  b, _, h, _ = q.shape

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_dkv_kernel, cfg, drows is not None),
        grid=(b, h, pl.cdiv(cfg.lk, cfg.bk)),
        in_specs=_in_specs(cfg, rows, drows, mask),
        out_specs=[seq_spec(cfg.lk, cfg.d), seq_spec(cfg.lk, cfg.dv)],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype),
                   jax.ShapeDtypeStruct(v.shape, v.dtype)],
        compiler_params=gpu_tile.compiler_params(cfg.d),
        interpret=interpret, name="softattn_gpu_dkv")
  return run(cfg, build, *_args(q, k, v, do, rows, brows, drows, mask))
