"""One pass of the threshold search (sparsemax, α-entmax) as a kernel of its
own: per-row sums over the valid keys that the pointwise kernel would need
one pass each for.

With ``z = (alpha-1) T(s)`` (``T``: the normalizer's transform, its row
statistics included) and ``p = 1/(alpha-1)``, one streaming pass over the key
blocks writes per query row, ``[B, Lq, H, W]`` f32, as
``common.streams.Sums`` says:

* ``Sums(what="stats")``: ``max z``, ``sum z`` and the count ``n`` of
  valid keys (``W = 3``): the bracket ``[max z - 1, max z - n^(1-alpha)]``
  of the threshold and the power-mean bound ``mean z - n^(1-alpha)``;
* ``Sums(what="edges")``: for each of the ``E`` per-row candidates
  ``tau_e`` (given in the value slot, ``[B, Lq, H, E]``)
  ``S0_e = sum [z - tau_e]_+^p`` and ``S1_e = sum [z - tau_e]_+^(p-1)``
  (``W = 2E``): ``f(tau_e) = S0_e - 1`` and ``f'(tau_e) = -p S1_e``, a
  Newton step's two sums in one pass, or the function at ``E`` points of a
  bracket.

No gradient: the search runs under ``stop_gradient`` (``common/streams.py``
takes its one differentiable Newton step with the pointwise kernels, whose
VJP gives the implicit-function gradient). Grid, blocks, masks and ragged
tails are the forward kernels' (``forward.py``); the ``E`` sums cost ``E``
elementwise passes over each score tile but one ``q k^T`` and one read of
K.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from softattn.modes import NEG
from softattn.pallas.common import prepare, tile
from softattn.pallas.tpu import blocks, forward
from softattn.streams import _power


def _kernel(cfg, sums, n_tau, q_ref, k_ref, taus_ref, rows_ref, *refs):
  mask_ref = refs[0] if cfg.has_mask else None
  o_ref, acc_sc = refs[-2:]
  qi, kj = pl.program_id(2), pl.program_id(3)
  width = sums.width(n_tau)

  @pl.when(kj == 0)
  def _():
    if sums.what == "stats":  # column 0 a running max, the others sums
      col = jax.lax.broadcasted_iota(jnp.int32, acc_sc.shape, 2)
      acc_sc[...] = jnp.where(col == 0, NEG, 0.0).astype(jnp.float32)
    else:
      acc_sc[...] = jnp.zeros_like(acc_sc)

  @pl.when(tile.needed(cfg, qi, kj))
  def _():
    for h in range(cfg.hp):
      q, k, _ = forward._qkv(cfg, q_ref, k_ref, None, h, qi, kj)
      s, valid = tile.scores(cfg, qi, kj, q, k, tile.mask_row(cfg, mask_ref, h))
      z = sums.a1 * tile.transform(cfg, s, tile.row_values(cfg, rows_ref[h]))
      if sums.what == "stats":
        zmax = jnp.max(jnp.where(valid, z, NEG), axis=-1, keepdims=True)
        acc_sc[h, :, 0:1] = jnp.maximum(acc_sc[h, :, 0:1], zmax)
        acc_sc[h, :, 1:2] += jnp.sum(jnp.where(valid, z, 0.0), axis=-1,
                                     keepdims=True)
        acc_sc[h, :, 2:3] += jnp.sum(valid.astype(jnp.float32), axis=-1,
                                     keepdims=True)
        continue
      taus = taus_ref[:, pl.ds(h * n_tau, n_tau)]
      for e in range(n_tau):
        # where, not a product: a ragged tail's rows read garbage taus.
        x = jnp.where(valid, jax.nn.relu(z - taus[:, e:e + 1]), 0.0)
        acc_sc[h, :, e:e + 1] += jnp.sum(_power(x, sums.pw), axis=-1,
                                         keepdims=True)
        acc_sc[h, :, n_tau + e:n_tau + e + 1] += jnp.sum(
            _power(x, sums.pw - 1.0), axis=-1, keepdims=True)

  @pl.when(kj == pl.num_programs(3) - 1)
  def _():
    for h in range(cfg.hp):
      o_ref[:, pl.ds(h * width, width)] = acc_sc[h]


def row_sums(cfg: tile.Config, sums: Sums, q, k, taus, rows, mask):
  """``[B, Lq, H*W]`` f32 (module docstring); ``q``, ``k``: ``[B, L, H*D]``,
  ``taus``: ``[B, Lq, H*E]``."""
  b, h = q.shape[0], q.shape[2] // cfg.d
  n_tau = taus.shape[2] // h
  width = sums.width(n_tau)
  specs = forward._specs(cfg, rows.shape[-1], mask)
  # (q, k, taus, rows[, mask]): the taus ride in the value slot, by query.
  specs = [specs[0], specs[1], tile.seq_spec(cfg, cfg.bq, n_tau, axis=2)
           ] + specs[3:]
  args = (q, k, taus, rows) + (() if mask is None else (mask,))

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_kernel, cfg, sums, n_tau),
        grid=forward.grid(cfg, b, h),
        in_specs=specs,
        out_specs=tile.seq_spec(cfg, cfg.bq, width, axis=2),
        out_shape=jax.ShapeDtypeStruct((b, cfg.lq, h * width), jnp.float32),
        scratch_shapes=[pltpu.VMEM((cfg.hp, cfg.bq, width), jnp.float32)],
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=blocks.cost_estimate(
            "stats", b, h, cfg.lq, cfg.lk, cfg.d, 0, q.dtype.itemsize,
            cfg.causal),
        interpret=interpret, name=f"softattn_threshold_{sums.what}")
  return forward.run(cfg, build, *args)


def per_shard(cfg, sums, query, key, taus, prow, kmask):
  """``wrapper._per_shard``'s contract for one pass: ``[B, Lq, H, W]``."""
  b, lq, h, _ = query.shape
  lk = key.shape[1]
  flat = lambda x: x.reshape(x.shape[0], x.shape[1], -1)  # noqa: E731
  q, k = flat(query), flat(key)
  nrow = jnp.broadcast_to(prepare.counts(kmask, b, h, lq, lk, cfg.causal),
                          (b, h, lq, 1))
  rows = forward.rows(cfg, q, k, nrow, prow, kmask)
  out = row_sums(cfg, sums, q, k, flat(taus.astype(jnp.float32)), rows, kmask)
  return out.reshape(b, lq, h, -1)
