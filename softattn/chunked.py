"""Memory-efficient attention: query blocks x streamed key blocks.

Used by ``dot_product_attention(..., implementation="chunked")``; see that
module's docstring for the contract. How it works:

* Queries are cut into blocks of ``cq`` and mapped over with ``lax.map`` whose
  body is wrapped in ``jax.checkpoint``: the backward pass stores only each
  block's inputs and recomputes one block at a time, so the live residuals are
  those of a single ``[B, H, cq, Lk]`` block, never ``[B, H, Lq, Lk]``.
* Inside a block, key blocks of ``ck`` are streamed with ``lax.scan`` through
  the normalizer's mode (``softattn.modes``, the table the dense and fused
  paths run too): ``init``, one ``update`` per key block (the online softmax
  with a running max for ``exp``, a running max >= 0 for ``softpick``, plain
  sums of ``g v`` and ``g`` for ``ratio``, of ``phi v`` for ``pointwise``),
  ``output``. The backward is autodiff through the scan.
* Normalizers that read row statistics get them first: the count ``n`` from the
  mask alone; mean and variance either from the key moments (``mean_i =
  scale q_i . mean(K)``, ``var_i = scale^2 q_i^T Cov(K) q_i``, exact when the
  mask depends only on the key and there is no bias, causal mask or soft-cap:
  the NormSoftmax identity of the spec) or from a first streaming pass merged
  with Chan's formula.
* A ``logits_soft_cap`` ``c`` caps each block's scaled scores,
  ``c tanh(s / c)``, before the bias is added (the dense path's order); the
  statistics pass and every stream read the capped scores.

* ``rowwise`` normalizers that declare a ``stream`` (sparsemax, entmax15,
  stick_breaking; ``softattn.streams``) run it instead: several passes over
  the key blocks through the same scan (a threshold search then a weighted
  pass; a reverse-order scan).

Lengths that are not multiples of the block sizes are padded with masked keys /
discarded queries.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from softattn import modes
from softattn.modes import soft_cap
from softattn.normalizers.core import RowStats, merge_stats, row_stats


def _pad(x, axis, size, value):
  extra = size - x.shape[axis]
  if extra == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, extra)
  return jnp.pad(x, widths, constant_values=value)


def _split(x, axis, n_blocks):
  """[..., n_blocks * c, ...] -> [n_blocks, ..., c, ...]."""
  shape = x.shape[:axis] + (n_blocks, x.shape[axis] // n_blocks) + (
      x.shape[axis + 1:])
  return jnp.moveaxis(x.reshape(shape), axis, 0)


def _blocked(x, axis, n_blocks, size, pad_value):
  """Pads and splits ``x`` along ``axis`` unless that axis broadcasts (size 1).

  Returns ``(blocks or None, constant or None)``.
  """
  if x is None:
    return None, None
  if x.shape[axis] == 1:
    return None, x
  return _split(_pad(x, axis, size, pad_value), axis, n_blocks), None


def _key_moments(q, k, key_ok, scale, ct):
  """Row mean/var of ``scale * q.k`` over valid keys from K's moments.

  q: [B,H,Lq,D]; k: [B,H,Lk,D]; key_ok: bool broadcastable to [B,H,1,Lk].
  """
  w = jnp.broadcast_to(key_ok, k.shape[:2] + (1, k.shape[2]))[:, :, 0]
  w = w.astype(ct)[..., None]                             # [B,H,Lk,1]
  n = jnp.sum(w, axis=2, keepdims=True)                      # [B,H,1,1]
  safe_n = jnp.maximum(n, 1.0)
  mu = jnp.sum(w * k, axis=2, keepdims=True) / safe_n        # [B,H,1,D]
  kc = (k - mu) * w
  cov = jnp.einsum("bhkd,bhke->bhde", kc, kc) / safe_n       # [B,H,D,D]
  mean = scale * jnp.einsum("bhqd,bhkd->bhqk", q, mu)        # [B,H,Lq,1]
  var = scale * scale * jnp.einsum("bhqd,bhde,bhqe->bhq", q, cov, q)[..., None]
  n = jnp.broadcast_to(n, mean.shape)
  return RowStats(n, mean, jnp.maximum(var, 0.0))


def chunked_attention(query, key, value, norm, p, mask, bias, scale, causal,
                      chunk_size, query_chunk_size, logits_soft_cap=None):
  """See module docstring. Shapes as ``dot_product_attention``; mask/bias 4-D;
  ``logits_soft_cap``: a checked float or None."""
  b, lq, h, d = query.shape
  lk, dv = key.shape[1], value.shape[-1]
  ct = jnp.promote_types(query.dtype, jnp.float32)  # compute dtype
  ck, cq = min(chunk_size, lk), min(query_chunk_size, lq)
  if ck < 1 or cq < 1:
    raise ValueError(f"chunk sizes must be >= 1, got {chunk_size}, "
                     f"{query_chunk_size}")
  nk, nq = math.ceil(lk / ck), math.ceil(lq / cq)
  lk_pad, lq_pad = nk * ck, nq * cq

  to_heads = lambda x: jnp.transpose(x, (0, 2, 1, 3))  # noqa: E731
  q = to_heads(_pad(query, 1, lq_pad, 0))                     # [B,H,Lq',D]
  k = to_heads(_pad(key, 1, lk_pad, 0))
  v = to_heads(_pad(value, 1, lk_pad, 0))
  key_in_range = (jnp.arange(lk_pad) < lk)[None, None, None, :]

  stats_all = None
  if (norm.needs == "moments" and bias is None and not causal
      and logits_soft_cap is None and (mask is None or mask.shape[2] == 1)):
    key_ok = key_in_range if mask is None else jnp.logical_and(
        key_in_range, _pad(mask, 3, lk_pad, False))
    stats_all = _key_moments(q.astype(ct), k.astype(ct), key_ok, scale, ct)

  # Per-query-block inputs (xs of lax.map) vs. constants.
  q_blocks = _split(q, 2, nq)
  mask_qb, mask_c = _blocked(mask, 2, nq, lq_pad, False)
  bias_qb, bias_c = _blocked(bias, 2, nq, lq_pad, 0.0)
  stats_qb = None if stats_all is None else jax.tree.map(
      lambda x: _split(_pad(x, 2, lq_pad, 0.0), 2, nq), stats_all)
  k_blocks, v_blocks = _split(k, 2, nk), _split(v, 2, nk)
  in_range_blocks = _split(key_in_range, 3, nk)

  mode, eps, upper = norm.mode, norm.eps(p), norm.upper(p)

  def block(xs):
    qi, q_blk, mask_q, bias_q, stats_q = xs
    mask_q = mask_c if mask_q is None else mask_q
    bias_q = bias_c if bias_q is None else bias_q
    mask_kb, mask_kc = _blocked(mask_q, 3, nk, lk_pad, False)
    bias_kb, bias_kc = _blocked(bias_q, 3, nk, lk_pad, 0.0)

    def scores_and_valid(kj, k_blk, in_range, mask_k, bias_k, with_scores=True):
      valid = in_range
      mask_k = mask_kc if mask_k is None else mask_k
      if mask_k is not None:
        valid = jnp.logical_and(valid, mask_k)
      if causal:
        qpos = qi * cq + jnp.arange(cq)[:, None]
        kpos = kj * ck + jnp.arange(ck)[None, :]
        valid = jnp.logical_and(valid, kpos <= qpos)
      valid = jnp.broadcast_to(valid, (b, h, cq, ck))
      if not with_scores:
        return None, valid
      s = jnp.einsum("bhqd,bhkd->bhqk", q_blk, k_blk,
                     preferred_element_type=ct) * scale
      s = soft_cap(s, logits_soft_cap)
      bias_k = bias_kc if bias_k is None else bias_k
      if bias_k is not None:
        s = s + bias_k.astype(ct)
      return jnp.where(valid, s, 0.0), valid

    key_xs = (jnp.arange(nk), k_blocks, v_blocks, in_range_blocks, mask_kb,
              bias_kb)

    stats = stats_q
    if stats is None and norm.needs != "none":
      moments = norm.needs == "moments"

      def stat_step(acc, xs):
        kj, k_blk, _, in_range, mask_k, bias_k = xs
        s, valid = scores_and_valid(kj, k_blk, in_range, mask_k, bias_k,
                                    with_scores=moments)
        part = row_stats(s if moments else valid.astype(ct), valid,
                         norm.needs)
        return merge_stats(acc, part), None

      zeros = jnp.zeros((b, h, cq, 1), ct)
      init = RowStats(zeros, zeros, zeros) if moments else RowStats(zeros)
      stats, _ = jax.lax.scan(stat_step, init, key_xs)

    def scan_keys(fn, init, reverse=False, frozen=False):
      """``fn(carry, t, valid, v)`` over the key blocks (``frozen``: ``t``
      and ``v`` under stop_gradient, for searches that are not
      differentiated)."""
      def step(carry, xs):
        kj, k_blk, v_blk, in_range, mask_k, bias_k = xs
        s, valid = scores_and_valid(kj, k_blk, in_range, mask_k, bias_k)
        t = norm.transform(s, stats, **p)
        if frozen:
          t, v_blk = jax.lax.stop_gradient((t, v_blk))
        return fn(carry, t, valid, v_blk), None
      return jax.lax.scan(step, init, key_xs, reverse=reverse)[0]

    if norm.stream is not None:  # rowwise: several passes (softattn.streams)
      return norm.stream.run(scan_keys, (b, h, cq), dv, ct, p)
    carry = scan_keys(
        lambda c, t, valid, v: modes.update(mode, c, t, valid, v,
                                            upper is not None),
        modes.init(mode, (b, h, cq), dv, ct, m0=upper))
    return modes.output(mode, carry, eps)[0]

  out = jax.lax.map(jax.checkpoint(block),
                    (jnp.arange(nq), q_blocks, mask_qb, bias_qb, stats_qb))
  # [nq, B, H, cq, Dv] -> [B, Lq, H, Dv]
  out = jnp.moveaxis(out, 0, 2).reshape(b, h, lq_pad, dv)[:, :, :lq]
  return jnp.transpose(out, (0, 2, 1, 3)).astype(value.dtype)
