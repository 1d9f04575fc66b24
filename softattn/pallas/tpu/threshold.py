"""One pass of the threshold search (sparsemax, α-entmax) as a kernel of its
own: per-row sums over the valid keys that the pointwise kernel would need
one pass each for.

With ``z = (alpha-1) T(s)`` (``T``: the normalizer's transform, its row
statistics included) and ``p = 1/(alpha-1)``, one streaming pass over the key
blocks writes per query row, ``[B, Lq, H, W]`` f32, as
``common.streams.Sums`` says:

* ``Sums(what="stats")``: ``max z``, ``sum z`` and the count ``n`` of
  valid keys: the bracket ``[max z - 1, max z - n^(1-alpha)]`` of the
  threshold and the power-mean bound ``mean z - n^(1-alpha)``; then, with
  ``segment``, ``max z`` over the valid keys of each ``segment`` keys
  (``NEG`` where none), the weighted pass's key blocks, whose dead tiles it
  skips (``W = 3 + cdiv(Lk, segment)``; ``common/streams.py``, step 5).
  This pass's own key blocks need not be the segments (one value column:
  more heads per block, so the block rule often gives it smaller ones);
  both are 128 times powers of 2, or the whole length, so a tile lies in
  one segment or holds whole ones (``segments_fit``);
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


def _block_max(cfg, segment: int, acc, h, kj, zm):
  """Running max of ``zm`` (``z``, ``NEG`` where invalid) per ``segment``
  keys into columns ``3:`` of head ``h``'s ``[bq, W]`` accumulator (lane
  iota selects, as ``stick.py`` writes its per-block carries)."""
  lane = jax.lax.broadcasted_iota(jnp.int32, acc.shape[1:], 1)

  def put(col, part):
    m = jnp.max(part, axis=-1, keepdims=True)
    acc[h] = jnp.where(lane == 3 + col, jnp.maximum(acc[h], m), acc[h])

  if cfg.bk <= segment:  # the tile lies in one segment (segments_fit)
    put(jax.lax.div(kj * cfg.bk, segment), zm)
  else:                  # the tile holds whole segments, the last maybe cut
    per = pl.cdiv(cfg.bk, segment)
    for i in range(per):
      put(kj * per + i, zm[:, i * segment:(i + 1) * segment])


def segments_fit(bk: int, lk: int, segment: int) -> bool:
  """Whether every ``bk``-key tile of this pass lies in one ``segment`` or
  holds whole ones (block sizes are 128 times powers of 2, or the whole
  length, so passes of one call always fit)."""
  return (segment % bk == 0 or segment >= lk or bk % segment == 0
          or bk >= lk)


def _kernel(cfg, sums, n_tau, q_ref, k_ref, taus_ref, rows_ref, *refs):
  mask_ref = refs[0] if cfg.has_mask else None
  o_ref, acc_sc = refs[-2:]
  qi, kj = pl.program_id(2), pl.program_id(3)
  width = sums.width(n_tau, cfg.lk)

  @pl.when(kj == 0)
  def _():
    if sums.what == "stats":  # columns 0 and 3: running maxes, 1, 2 sums
      col = jax.lax.broadcasted_iota(jnp.int32, acc_sc.shape, 2)
      acc_sc[...] = jnp.where((col == 0) | (col >= 3), NEG,
                              0.0).astype(jnp.float32)
    else:
      acc_sc[...] = jnp.zeros_like(acc_sc)

  @pl.when(tile.needed(cfg, qi, kj))
  def _():
    for h in range(cfg.hp):
      q, k, _ = forward._qkv(cfg, q_ref, k_ref, None, h, qi, kj)
      s, valid = tile.scores(cfg, qi, kj, q, k, tile.mask_row(cfg, mask_ref, h))
      z = sums.a1 * tile.transform(cfg, s, tile.row_values(cfg, rows_ref[h]))
      if sums.what == "stats":
        zm = jnp.where(valid, z, NEG)
        zmax = jnp.max(zm, axis=-1, keepdims=True)
        acc_sc[h, :, 0:1] = jnp.maximum(acc_sc[h, :, 0:1], zmax)
        acc_sc[h, :, 1:2] += jnp.sum(jnp.where(valid, z, 0.0), axis=-1,
                                     keepdims=True)
        acc_sc[h, :, 2:3] += jnp.sum(valid.astype(jnp.float32), axis=-1,
                                     keepdims=True)
        if sums.segment:
          _block_max(cfg, sums.segment, acc_sc, h, kj, zm)
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
  width = sums.width(n_tau, cfg.lk)
  if sums.segment and not segments_fit(cfg.bk, cfg.lk, sums.segment):
    raise ValueError(f"key blocks of {cfg.bk} neither lie in nor hold whole "
                     f"{sums.segment}-key segments (Lk = {cfg.lk})")
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
