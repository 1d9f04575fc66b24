"""GPU (Triton) forward kernels: row moments, then the fused attention pass.

One program per (batch, head, query block), grid ``(B, H, cdiv(Lq, bq))``;
the key blocks stream in a ``fori_loop`` carrying the mode's state
``(m, l, acc)`` from ``softattn.modes`` (``gpu_tile`` says why and how the
layout works). The math per tile is the TPU kernels' (``tile.scores``,
``tile.transform``, ``modes.update``/``output``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from softattn import modes
from softattn.pallas.common import tile
from softattn.pallas.common.operands import out_dtype
from softattn.pallas.gpu.triton import tile as gpu_tile


def run(cfg: tile.Config, build, *args):
  """``build(interpret)(*args)``: the Triton kernel when lowered for CUDA or
  ROCm, the Pallas interpreter elsewhere, unless ``cfg.interpret`` fixes
  it."""
  if cfg.interpret is not None:
    return build(cfg.interpret)(*args)
  triton = lambda *a: build(False)(*a)  # noqa: E731
  return jax.lax.platform_dependent(
      *args, cuda=triton, rocm=triton, default=lambda *a: build(True)(*a))


def seq_spec(length: int, width: int):
  """One ``[length, width]`` head slice of a ``[B, L, H, width]`` array."""
  return pl.BlockSpec((None, length, None, width),
                      lambda b, h, i: (b, 0, h, 0))


def row_spec(width: int, length: int):
  """One head's ``[width, length]`` slice of a ``[B, H, width, L]`` array."""
  return pl.BlockSpec((None, None, width, length),
                      lambda b, h, i: (b, h, 0, 0))


def mask_spec(cfg: tile.Config, mask_shape):
  """The ``[Lk]`` key-mask row of a ``[Bm, Hm, Lk]`` int32 mask (size-1
  batch/head dims broadcast)."""
  bm = mask_shape[0]
  return pl.BlockSpec(
      (None, None, cfg.lk),
      lambda b, h, i: (b if bm > 1 else 0, h if cfg.mask_heads else 0, 0))


def _qkv_specs(cfg):
  return [seq_spec(cfg.lq, cfg.d), seq_spec(cfg.lk, cfg.d),
          seq_spec(cfg.lk, cfg.dv)]


def _kv(cfg, k_ref, v_ref, kj):
  k0 = kj * cfg.bk
  k = gpu_tile.load_rows(k_ref, k0, cfg.bk, cfg.lk, cfg.ragged_k)
  v = None if v_ref is None else gpu_tile.load_rows(v_ref, k0, cfg.bk, cfg.lk,
                                                    cfg.ragged_k)
  return k, v


# -- statistics: n, mean, biased variance over valid keys (Chan's merge) ------
def _stats_kernel(cfg, q_ref, k_ref, *refs):
  mask_ref = refs[0] if cfg.has_mask else None
  out_ref = refs[-1]
  qi = pl.program_id(2)
  q = gpu_tile.load_rows(q_ref, qi * cfg.bq, cfg.bq, cfg.lq, cfg.ragged_q)

  def body(kj, carry):
    na, ma, m2a = carry
    k, _ = _kv(cfg, k_ref, None, kj)
    s, valid = tile.scores(cfg, qi, kj, q, k,
                           gpu_tile.mask_row(cfg, mask_ref, kj))
    nb = jnp.sum(valid.astype(jnp.float32), axis=-1, keepdims=True)
    mb = jnp.sum(s, axis=-1, keepdims=True) / jnp.maximum(nb, 1.0)
    c = jnp.where(valid, s - mb, 0.0)
    m2b = jnp.sum(c * c, axis=-1, keepdims=True)
    n = na + nb
    delta = mb - ma
    mean = ma + delta * (nb / jnp.maximum(n, 1.0))
    m2 = m2a + m2b + delta * delta * (na * nb / jnp.maximum(n, 1.0))
    return n, mean, m2

  zero = jnp.zeros((cfg.bq, 1), jnp.float32)
  n, mean, m2 = jax.lax.fori_loop(0, gpu_tile.k_blocks(cfg, qi), body,
                                  (zero, zero, zero))
  for i, x in enumerate((mean, m2 / jnp.maximum(n, 1.0))):
    gpu_tile.store_col(out_ref, i, qi * cfg.bq, x, cfg.lq, cfg.ragged_q)


def moments(cfg: tile.Config, q, k, mask):
  """``[B, H, 2, Lq]`` (mean, biased var) of each row's valid scores."""
  b, _, h, _ = q.shape
  specs = _qkv_specs(cfg)[:2]
  if mask is not None:
    specs.append(mask_spec(cfg, mask.shape))
  args = (q, k) + (() if mask is None else (mask,))

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_stats_kernel, cfg),
        grid=(b, h, pl.cdiv(cfg.lq, cfg.bq)), in_specs=specs,
        out_specs=row_spec(2, cfg.lq),
        out_shape=jax.ShapeDtypeStruct((b, h, 2, cfg.lq), jnp.float32),
        compiler_params=gpu_tile.compiler_params(cfg.d),
        interpret=interpret, name="softattn_gpu_stats")
  return run(cfg, build, *args)


# -- attention -----------------------------------------------------------------
def _forward_kernel(cfg, q_ref, k_ref, v_ref, rows_ref, *refs):
  mask_ref = refs[0] if cfg.has_mask else None
  o_ref, res_ref = refs[-2:]
  qi = pl.program_id(2)
  q0 = qi * cfg.bq
  q = gpu_tile.load_rows(q_ref, q0, cfg.bq, cfg.lq, cfg.ragged_q)
  rv = gpu_tile.row_values(cfg, rows_ref, qi)

  def body(kj, carry):
    k, v = _kv(cfg, k_ref, v_ref, kj)
    s, valid = tile.scores(cfg, qi, kj, q, k,
                           gpu_tile.mask_row(cfg, mask_ref, kj))
    t = tile.transform(cfg, s, rv)
    return modes.update(cfg.mode, carry, t, valid, v)

  carry = modes.init(cfg.mode, (cfg.bq,), cfg.dv, jnp.float32)
  carry = jax.lax.fori_loop(0, gpu_tile.k_blocks(cfg, qi), body, carry)
  out, res_a, res_b = modes.output(cfg.mode, carry, tile.scalar(cfg, rv))
  gpu_tile.store_rows(o_ref, q0, out.astype(o_ref.dtype), cfg.lq,
                      cfg.ragged_q)
  for i, x in enumerate((res_a, res_b)):
    gpu_tile.store_col(res_ref, i, q0, x, cfg.lq, cfg.ragged_q)


def attention(cfg: tile.Config, q, k, v, rows, mask):
  """``(out [B, Lq, H, Dv], res [B, H, 2, Lq])``; ``rows``: ``[B, H, R, Lq]``;
  ``res``: the mode's per-row residuals for the backward."""
  b, _, h, _ = q.shape
  specs = _qkv_specs(cfg) + [row_spec(rows.shape[2], cfg.lq)]
  if mask is not None:
    specs.append(mask_spec(cfg, mask.shape))
  args = (q, k, v, rows) + (() if mask is None else (mask,))

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_forward_kernel, cfg),
        grid=(b, h, pl.cdiv(cfg.lq, cfg.bq)), in_specs=specs,
        out_specs=[seq_spec(cfg.lq, cfg.dv), row_spec(2, cfg.lq)],
        out_shape=[jax.ShapeDtypeStruct((b, cfg.lq, h, cfg.dv),
                                        out_dtype(cfg, v.dtype)),
                   jax.ShapeDtypeStruct((b, h, 2, cfg.lq), jnp.float32)],
        compiler_params=gpu_tile.compiler_params(
            cfg.d, gpu_tile.forward_stages(cfg, k.dtype)),
        interpret=interpret, name="softattn_gpu_forward")
  return run(cfg, build, *args)
