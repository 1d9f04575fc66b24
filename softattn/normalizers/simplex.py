"""Normalizers that need the whole score row: sparse projections onto the
simplex and stick-breaking. The dense path computes them exactly (sorted
row, reverse cumulative sum); the chunked path streams them in several
passes over key blocks (``softattn.streams``: a threshold search, a reverse
scan)."""

import jax
import jax.numpy as jnp

from softattn import streams
from softattn.normalizers.core import Normalizer
from softattn.normalizers.domains import PASSES, TOLERANCE

# The streamed threshold search (chunked path): Newton passes at most, and
# the step size at which a row has converged. 20 passes cover the 1-11
# measured on Gaussian rows (softattn.streams) with room; 1e-6 is a few
# float32 ulps of tau.
_THRESHOLD_DEFAULTS = dict(max_passes=20, tol=1e-6)
_THRESHOLD_DOMAINS = dict(max_passes=PASSES, tol=TOLERANCE)


def _identity(s, stats, **unused):
  return s


def _sorted_desc(s, valid):
  """Row sorted descending with masked entries moved after the valid ones.

  Masked entries are set to the row's smallest valid value, so they sort last
  (ties are harmless: the support is also capped at the valid count).
  """
  row_min = jnp.min(jnp.where(valid, s, jnp.inf), axis=-1, keepdims=True)
  row_min = jnp.where(jnp.isfinite(row_min), row_min, 0.0)
  z = jnp.where(valid, s, row_min)
  n_valid = jnp.sum(valid, axis=-1, keepdims=True)
  k = jnp.arange(1, s.shape[-1] + 1, dtype=s.dtype)
  return z, -jnp.sort(-z, axis=-1), k, n_valid


def _sparsemax(s, valid, **unused):
  z, z_sorted, k, n_valid = _sorted_desc(s, valid)
  cumsum = jnp.cumsum(z_sorted, axis=-1)
  support = (1.0 + k * z_sorted > cumsum) & (k <= n_valid)
  k_max = jnp.maximum(jnp.sum(support, axis=-1, keepdims=True), 1)
  tau = (jnp.take_along_axis(cumsum, k_max - 1, axis=-1) - 1.0) / k_max
  return jax.nn.relu(z - tau)


sparsemax = Normalizer(
    name="sparsemax", mode="rowwise", needs="none",
    defaults=dict(_THRESHOLD_DEFAULTS), domains=_THRESHOLD_DOMAINS,
    transform=_identity, row_fn=_sparsemax, stream=streams.threshold(2.0),
    formula="`relu(s-τ)`, τ: weights sum to 1", source="Martins & Astudillo 2016",
    doc=r"""Sparsemax (Martins & Astudillo 2016, arXiv 1602.02068).

    Euclidean projection of the scores onto the simplex:
    ``w = relu(s - tau)`` with ``tau`` chosen so the weights sum to 1; exact
    zeros outside the support. Dense: ``tau`` from the *sorted* whole row.
    Chunked: ``tau`` by streamed Newton passes over key blocks
    (``softattn.streams``; ``max_passes``, ``tol``), then one weighted pass.
    """)


def _entmax15(s, valid, **unused):
  z, z_sorted, k, n_valid = _sorted_desc(s, valid)
  # alpha = 1.5: w = relu(x - tau)^2 with x = (s - max) / 2 (Peters et al.,
  # exact sort-based algorithm).
  top = jax.lax.stop_gradient(z_sorted[..., :1])
  x, x_sorted = (z - top) / 2.0, (z_sorted - top) / 2.0
  mean = jnp.cumsum(x_sorted, axis=-1) / k
  mean_sq = jnp.cumsum(x_sorted * x_sorted, axis=-1) / k
  delta = (1.0 - k * (mean_sq - mean * mean)) / k
  # Double where: sqrt's infinite slope at 0 must not reach the gradient of
  # candidates that are not selected (0 * inf = NaN).
  pos = delta > 0
  tau = mean - jnp.where(pos, jnp.sqrt(jnp.where(pos, delta, 1.0)), 0.0)
  support = (tau <= x_sorted) & (k <= n_valid)
  k_star = jnp.maximum(jnp.sum(support, axis=-1, keepdims=True), 1)
  tau_star = jnp.take_along_axis(tau, k_star - 1, axis=-1)
  return jnp.square(jax.nn.relu(x - tau_star))


entmax15 = Normalizer(
    name="entmax15", mode="rowwise", needs="none",
    defaults=dict(_THRESHOLD_DEFAULTS), domains=_THRESHOLD_DOMAINS,
    transform=_identity, row_fn=_entmax15, stream=streams.threshold(1.5),
    formula="`relu(s/2-τ)²`, τ: weights sum to 1", source="Peters et al. 2019",
    doc=r"""1.5-entmax (Peters, Niculae & Martins 2019, arXiv 1905.05702).

    The 1.5-Tsallis projection onto the simplex: ``w = relu(s/2 - tau)^2``,
    sparse but smoother than sparsemax. Dense: the exact sort-based
    algorithm. Chunked: ``tau`` by streamed Newton passes on
    ``sum relu(s/2 - tau)^2 = 1`` (``softattn.streams``; ``max_passes``,
    ``tol``), then one weighted pass.
    """)


def _stick_breaking(s, valid, **unused):
  # w_j = beta_j * prod_{k > j, valid} (1 - beta_k), beta = sigmoid(s), in log
  # space: log(1 - sigmoid(s)) = log_sigmoid(-s).
  log_rest = jnp.where(valid, jax.nn.log_sigmoid(-s), 0.0)
  after = jnp.flip(jnp.cumsum(jnp.flip(log_rest, -1), axis=-1), -1) - log_rest
  return jnp.exp(jax.nn.log_sigmoid(s) + after)


stick_breaking = Normalizer(
    name="stick_breaking", mode="rowwise", needs="none", defaults={},
    transform=_identity, row_fn=_stick_breaking, is_distribution=False,
    stream=streams.STICK_BREAKING,
    formula="`β_j Π_{k>j}(1-β_k)`, β = sigmoid(s)", source="Tan et al. 2024",
    doc=r"""Stick-breaking attention (Tan et al. 2024, arXiv 2410.17980).

    ``beta = sigmoid(s)``, ``w_j = beta_j * prod_{k > j} (1 - beta_k)`` over the
    unmasked keys after ``j`` in the row, computed in log space. The nearest key
    breaks the stick first. The paper's causal form excludes the query's own
    position: use a *strictly* causal mask to match it. Weights sum to at most 1.
    Order-dependent over the whole row: the chunked path scans key blocks
    from the last to the first carrying the sum of ``log(1 - beta)``; the
    fused TPU kernels too, with per-block carries for the backward
    (``softattn.pallas.tpu.stick``).
    """)
