"""α-entmax and sparsemax on the fused kernels: the threshold search as
passes of the pointwise-mode kernel.

After the threshold ``tau`` of each row is known, the weights
``[z - tau]_+^p`` (``z = (alpha-1) t``, ``p = 1/(alpha-1)``) are a
pointwise normalizer whose transform reads ``tau`` as a per-row array
parameter, so every pass of the search is the existing fused kernel with a
derived ``pointwise`` declaration (``softattn.modes``): with values of ones
it returns row sums instead of outputs. Passes (each streams every key
block once, score tiles in VMEM):

1. ``n`` and ``sum z`` (two ones-valued passes), ``tau_0 = mean z -
   n^(1-alpha)`` (``f(tau_0) >= 0`` by the power mean; the chunked path
   also has the row max, which the kernels do not return);
2. Newton steps as in ``softattn.streams`` (two passes each, ``S0`` and
   ``S1``) in a ``lax.while_loop`` under ``stop_gradient``, until every
   row's step is below ``tol * (1 + |tau|)`` or ``max_passes``;
3. one differentiable Newton step from the converged ``tau`` and the
   weighted pass: the kernels' custom VJP gives the cotangent of ``tau``
   as a parameter column, and the step carries it to q and k through the
   same kernels (the implicit-function gradient, as on the chunked path).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from softattn.normalizers.core import Normalizer
from softattn.streams import _power, newton_step, search_threshold


def _derived(norm: Normalizer, a1: float, g) -> Normalizer:
  """The pointwise normalizer ``g((alpha-1) T(s) - tau)``, ``tau`` a
  parameter (T: ``norm``'s transform with its statistics)."""
  def transform(s, stats, *, tau, **p):
    return g(a1 * norm.transform(s, stats, **p) - tau)
  return dataclasses.replace(
      norm, name=f"{norm.name}/pass", mode="pointwise", transform=transform,
      row_fn=None, stream=None, defaults={**norm.defaults, "tau": 0.0},
      domains={}, learnable={}, linear_coef=None, linear_if=None)


def threshold_attention(attend, query, key, value, norm, p):
  """``attend(q, k, v, normalizer, params) -> [B, Lq, H, dv]`` is the fused
  kernel call with the caller's mask, scale and blocks."""
  a1 = norm.stream.alpha - 1.0
  pw = 1.0 / a1
  max_passes, tol = int(p["max_passes"]), p["tol"]
  b, lq, h, _ = query.shape
  # float32 ones: the row sums come back unrounded whatever the inputs'
  # dtype (bf16 sums moved tau by ~2^-8 / S1 and the gradients by far more).
  ones = jnp.ones((b, key.shape[1], h, 1), jnp.float32)
  fq, fk = jax.lax.stop_gradient((query, key))

  def row_sum(g, tau, q=fq, k=fk):
    """``sum_j g((alpha-1) t_ij - tau_i)`` over valid keys, ``[B, H, Lq, 1]``."""
    out = attend(q, k, ones, _derived(norm, a1, g), {**p, "tau": tau})
    return jnp.transpose(out.astype(jnp.float32), (0, 2, 1, 3))

  zero = jnp.zeros((b, h, lq, 1), jnp.float32)
  n = jnp.maximum(row_sum(jnp.ones_like, zero), 1.0)
  tau0 = row_sum(lambda x: x, zero) / n - n ** (-a1)

  def newton(tau, q=fq, k=fk):
    s0 = row_sum(lambda x: _power(jax.nn.relu(x), pw), tau, q, k)
    s1 = row_sum(lambda x: _power(jax.nn.relu(x), pw - 1.0), tau, q, k)
    return newton_step(tau, s0, s1, pw)

  tau = search_threshold(newton, tau0, max_passes, tol)
  tau, _ = newton(jax.lax.stop_gradient(tau), query, key)
  weights = _derived(norm, a1, lambda x: _power(jax.nn.relu(x), pw))
  return attend(query, key, value, weights, {**p, "tau": tau})
