"""α-entmax and sparsemax on the fused kernels: the threshold search as
passes over the key blocks.

The weights are ``[z - tau]_+^p`` (``z = (alpha-1) t``, ``p = 1/(alpha-1)``,
``t`` the normalizer's transform of the scores) with ``tau`` per row the root
of the decreasing, convex ``f(tau) = sum_j [z_j - tau]_+^p - 1``. Each pass
streams every key block once, score tiles in VMEM:

1. ``Sums("stats")`` (``tpu/threshold.py``): per row ``max z``, ``sum z``
   and the count ``n``. The root lies in ``[lo, hi]``,
   ``lo = max(max z - 1, mean z - n^(1-alpha))`` (``f(lo) >= 0``: the max
   term alone is 1; the power mean bounds the rest) and
   ``hi = max z - n^(1-alpha)`` (``f(hi) <= 0``: ``n`` terms of at most
   ``n^-1``);
2. ``Sums("edges")`` at ``EDGES`` evenly spaced candidates in ``[lo, hi)``:
   ``S0 = sum [z - tau]_+^p`` and ``S1 = sum [z - tau]_+^(p-1)`` at each, a
   coarse histogram of the row's mass near the root (as AdaSplash-2 starts
   from a histogram of the scores). The search starts with a Newton step
   from the largest candidate with ``S0 >= 1`` (left of the root, within
   ``(hi - lo) / EDGES <= 1 / EDGES`` of it), free: its sums are known;
3. Newton steps, one ``Sums("edges")`` pass each (``S0`` and ``S1``
   together), in a ``lax.while_loop`` under ``stop_gradient`` until every
   row's step is below ``tol * (1 + |tau|)`` or ``max_passes``. From the
   left of the root of a convex decreasing ``f`` they increase to it and
   never overshoot (for sparsemax each is exact once the support is);
4. one differentiable Newton step from the converged ``tau`` (two passes of
   the pointwise kernel, whose custom VJP gives the cotangent of ``tau`` as
   a parameter column: the implicit-function gradient, as on the chunked
   path) and the weighted pass, ``[z - tau]_+^p`` as a pointwise normalizer
   reading ``tau`` as a per-row array parameter;
5. the weighted pass skips the tiles whose weights are all 0. The stats
   pass also writes each row's ``max z`` over each key block of the
   weighted pass (``Sums.segment``; its own blocks may differ). Once
   ``tau`` is the one the weighted pass reads (after step 4's Newton step,
   which rounding may move either way), ``live_tiles`` marks a (query
   block, key block) tile dead when every row's block max is more than
   ``LIVE_MARGIN`` below its ``tau``. There every weight and its
   derivative are 0, so the tile adds nothing to the output, dQ, dK, dV or
   ``tau``'s cotangent, and the forward, dQ and dK/dV kernels neither
   compute it nor fetch its blocks (``tpu/skip.py``). Not skipped:
   prenorm's dQ and dK/dV (a dead tile's scores still move the row's mean
   and variance), the search's passes and step 4's two row sums (other
   blocks: one value column). How many tiles are dead on measured rows:
   ``benchmarks/README.md``, "Tiles the weighted pass skips".

Passes per row: ``5 + (Newton steps)``; before the bracket (``tau_0 = mean
z - n^(1-alpha)``, ``n`` and ``sum z`` by two pointwise passes, ``S0`` and
``S1`` by one each) ``5 + 2 (Newton steps)``, with more steps
(``benchmarks/threshold_passes.py``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from softattn.modes import NEG
from softattn.normalizers.core import Normalizer
from softattn.streams import _power, newton_step, search_threshold

# Candidates of the bracket pass: each costs two elementwise sums per score
# in that one pass; 8 left one Newton step on most measured rows
# (benchmarks/threshold_passes.py).
EDGES = 8
# How far below tau (relative to 1 + |tau|) a block's max z must be for the
# weighted pass to skip the block. The stats pass and the weighted pass
# compute z from the same q and k in other tiles (other block sizes, and
# for prenorm other merge orders of the moments), so the same z can differ
# by a few ulps between them; 1e-4 leaves ~1000x room and keeps only the
# blocks whose max is within 1e-4 of tau, which are rare.
LIVE_MARGIN = 1e-4


@dataclasses.dataclass(frozen=True)
class Sums:
  """What one pass of the threshold kernel sums (``tpu/threshold.py``;
  static, part of the kernel): ``"stats"`` or ``"edges"``; ``segment``
  (``"stats"``): also each row's ``max z`` per ``segment`` keys, the
  weighted pass's key block (0: not)."""
  alpha: float
  what: str
  segment: int = 0

  @property
  def a1(self) -> float:
    return self.alpha - 1.0

  @property
  def pw(self) -> float:
    return 1.0 / self.a1

  def width(self, n_tau: int, lk: int) -> int:
    """Output columns: ``max z, sum z, n`` and the segments' ``max z``
    (``lk`` keys), or ``S0`` and ``S1`` at each of ``n_tau`` candidates."""
    if self.what != "stats":
      return 2 * n_tau
    return 3 + (-(-lk // self.segment) if self.segment else 0)


def bracket(zmax, zsum, n, a1: float):
  """``(lo, hi)`` with ``f(lo) >= 0 >= f(hi)`` (module docstring, step 1);
  rows with no valid key get ``lo = hi`` (their weights are 0 anyway)."""
  n = jnp.maximum(n, 1.0)
  hi = zmax - n ** (-a1)
  lo = jnp.minimum(jnp.maximum(zmax - 1.0, zsum / n - n ** (-a1)), hi)
  return lo, hi


def candidates(lo, hi, count: int = EDGES):
  """``count`` evenly spaced taus in ``[lo, hi)``, ``[..., count]``."""
  return lo + (hi - lo) * (jnp.arange(count, dtype=lo.dtype) / count)


def start(taus, s0, s1, pw: float):
  """A Newton step from the largest candidate left of the root (``S0 >=
  1``; the first, ``lo``, when rounding leaves none), ``[..., 1]``."""
  count = taus.shape[-1]
  left = s0 >= 1.0
  last = count - 1 - jnp.argmax(left[..., ::-1], axis=-1, keepdims=True)
  last = jnp.where(jnp.any(left, axis=-1, keepdims=True), last, 0)
  pick = lambda x: jnp.take_along_axis(x, last, axis=-1)  # noqa: E731
  tau, _ = newton_step(pick(taus), pick(s0), pick(s1), pw)
  return tau


def _derived(norm: Normalizer, a1: float, g) -> Normalizer:
  """The pointwise normalizer ``g((alpha-1) T(s) - tau)``, ``tau`` a
  parameter (T: ``norm``'s transform with its statistics)."""
  def transform(s, stats, *, tau, **p):
    return g(a1 * norm.transform(s, stats, **p) - tau)
  return dataclasses.replace(
      norm, name=f"{norm.name}/pass", mode="pointwise", transform=transform,
      row_fn=None, stream=None, defaults={**norm.defaults, "tau": 0.0},
      domains={}, learnable={}, linear_coef=None, linear_if=None)


def live_tiles(bmax, tau, bq: int):
  """``[B, H, nq, nk]`` bool: whether a tile of ``bq`` query rows by one
  key block can have a nonzero weight ``[z - tau]_+^p`` (step 5 of the
  module docstring). ``bmax [B, H, Lq, nk]``: each row's ``max z`` per key
  block (``NEG`` where it has no valid key), ``tau [B, H, Lq, 1]``; rows
  past ``Lq`` (a ragged last query block) are dead. Dead only where surely
  dead: ``LIVE_MARGIN`` below tau, and a NaN is live."""
  b, h, lq, nk = bmax.shape
  below = bmax <= tau - LIVE_MARGIN * (1.0 + jnp.abs(tau))
  dead = below | (bmax <= NEG / 2)
  nq = -(-lq // bq)
  live = jnp.pad(~dead, ((0, 0), (0, 0), (0, nq * bq - lq), (0, 0)))
  return jnp.any(live.reshape(b, h, nq, bq, nk), axis=3)


def threshold_attention(attend, query, key, value, norm, p, tiles=None):
  """``attend(q, k, v, normalizer, params, sums=None, live=None) -> [B,
  Lq, H, dv]`` is the fused kernel call with the caller's mask, scale and
  blocks; with ``sums`` (a ``Sums``) one pass of the threshold kernel,
  ``v`` its per-row candidates ``[B, Lq, H, E]``, ``[B, Lq, H, width]``
  back; with ``live`` (``live_tiles``) the weighted pass skipping the dead
  tiles. ``tiles``: the weighted pass's ``(bq, bk)``, or None (no
  skipping)."""
  alpha = norm.stream.alpha
  a1 = alpha - 1.0
  pw = 1.0 / a1
  max_passes, tol = int(p["max_passes"]), p["tol"]
  b, lq, h, _ = query.shape
  fq, fk = jax.lax.stop_gradient((query, key))
  heads_last = lambda x: jnp.transpose(x, (0, 2, 1, 3))  # noqa: E731

  def one_pass(what, taus):
    """``[B, H, Lq, width]`` of one threshold-kernel pass at ``taus``;
    the stats pass also writes the block maxima of the weighted pass's
    key blocks (step 5)."""
    segment = tiles[1] if tiles and what == "stats" else 0
    out = attend(fq, fk, heads_last(taus), norm, p,
                 sums=Sums(alpha, what, segment))
    return heads_last(out)

  st = one_pass("stats", jnp.zeros((b, h, lq, 1), jnp.float32))
  lo, hi = bracket(st[..., 0:1], st[..., 1:2], st[..., 2:3], a1)
  taus = candidates(lo, hi)
  sums = one_pass("edges", taus)
  tau1 = start(taus, sums[..., :EDGES], sums[..., EDGES:], pw)

  def newton(tau):
    s = one_pass("edges", tau)
    return newton_step(tau, s[..., 0:1], s[..., 1:2], pw)

  tau = search_threshold(newton, tau1, max_passes, tol)

  # float32 ones: the row sums come back unrounded whatever the inputs'
  # dtype (bf16 sums moved tau by ~2^-8 / S1 and the gradients by far more).
  ones = jnp.ones((b, key.shape[1], h, 1), jnp.float32)

  def row_sum(g):
    """``sum_j g((alpha-1) t_ij - tau_i)``, differentiable in q and k."""
    out = attend(query, key, ones, _derived(norm, a1, g), {**p, "tau": tau})
    return heads_last(out.astype(jnp.float32))

  tau = jax.lax.stop_gradient(tau)
  s0 = row_sum(lambda x: _power(jax.nn.relu(x), pw))
  s1 = row_sum(lambda x: _power(jax.nn.relu(x), pw - 1.0))
  tau, _ = newton_step(tau, s0, s1, pw)
  weights = _derived(norm, a1, lambda x: _power(jax.nn.relu(x), pw))
  # Liveness at the tau the weighted pass reads (after the step above,
  # which may move it either way by rounding), not at the searched one.
  live = None if not tiles else live_tiles(
      st[..., 3:], jax.lax.stop_gradient(tau), tiles[0])
  return attend(query, key, value, weights, {**p, "tau": tau}, live=live)
