"""Per-layer attention diagnostics: score std, weight entropy, saturation.

These are the quantities the seed papers plot: the std of the normalizer's
input (NormSoftmax, Jiang et al. 2023, Fig. 2), the entropy of the attention
weights (Fig. 4), and how much of the normalizer's gradient is saturated (the
periodic paper's gradient plots, Wang et al. 2021). They need the dense
``[B, H, Lq, Lk]`` scores, so layers compute them only when the caller makes
the ``diagnostics`` collection mutable (at log steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Diagnostics look at a bounded slice of the batch and of the query rows.
# Every query row is an independent function of its own score row, so the
# values are exact for that slice; the bound keeps the Jacobian-diagonal pass
# (one jvp per key) cheap at log steps.
MAX_EXAMPLES = 16
MAX_QUERY_ROWS = 32
# Quantile levels of the distributions logged at every log step (in percent,
# which names the keys: ``score_q01`` ... ``lgrad_q99``). Five levels draw the
# body and both tails of a distribution as bands over training, the 2-D
# reading of the periodic paper's 3-D histograms (Wang et al. 2021, Fig. 3-4).
QUANTILES = (1, 10, 50, 90, 99)


def _slice_rows(scores, valid):
  b, _, lq, _ = scores.shape
  step = max(1, -(-lq // MAX_QUERY_ROWS))
  return (scores[:MAX_EXAMPLES, :, ::step], valid[:MAX_EXAMPLES, :, ::step])


def jacobian_diagonal(fn, scores):
  """``d fn(s)_ij / d s_ij`` for a row-wise ``fn`` over the last axis.

  The trick: rows do not interact, so one jvp with the tangent ``e_j`` placed
  in column ``j`` of *every* row gives column ``j`` of every row's Jacobian at
  once; its ``j``-th entry is the diagonal element. ``lax.map`` over the
  ``n`` keys costs ``n`` forward passes and holds one ``scores``-sized tangent
  at a time.
  """
  n = scores.shape[-1]

  def column(j):
    tangent = jnp.broadcast_to(
        (jnp.arange(n) == j).astype(scores.dtype), scores.shape)
    _, t = jax.jvp(fn, (scores,), (tangent,))
    return t[..., j]

  diag = jax.lax.map(column, jnp.arange(n))          # [n, ..., rows]
  return jnp.moveaxis(diag, 0, -1)


def _masked_quantiles(x, valid, prefix):
  """``{prefix}_qNN``: quantiles of ``x``'s valid entries (NaN if none)."""
  q = jnp.nanquantile(jnp.where(valid, x, jnp.nan),
                      jnp.asarray(QUANTILES, jnp.float32) / 100.0)
  return {f"{prefix}_q{level:02d}": q[i] for i, level in enumerate(QUANTILES)}


def attention_diagnostics(scores, weights, normalizer, params, mask=None):
  """Scalar diagnostics of one attention layer.

  Args:
    scores: ``[B, H, Lq, Lk]`` float32 normalizer inputs (scale applied).
    weights: ``normalizer(scores)``, same shape.
    normalizer: the ``Normalizer`` that made ``weights``.
    params: its resolved parameters (learnable ones included).
    mask: optional boolean mask broadcastable to ``scores``.

  Returns:
    dict of float32 scalars:

    * ``score_std``: per-row std of the scores over unmasked keys, averaged
      over rows (the per-row spread is what a softmax sees; it is invariant
      to per-row shifts).
    * ``attn_entropy``: mean over rows of ``-sum p log p`` with
      ``p = |w| / sum |w|`` (equal to ``w`` for distributions), in nats.
    * ``grad_saturation``: fraction of unmasked entries with
      ``|d w_ij / d s_ij| < 1e-3 / n`` (``n`` unmasked keys in the row),
      from ``jacobian_diagonal`` on at most ``MAX_EXAMPLES`` examples and
      ``MAX_QUERY_ROWS`` strided query rows.
    * ``score_qNN`` for NN in ``QUANTILES``: quantiles of the raw
      normalizer input over those entries (not row-centred: periodic
      normalizers see the absolute value).
    * ``lgrad_qNN``: quantiles of the scale-free local gradient
      ``n * |d w_ij / d s_ij|`` over those entries (1 for a uniform
      softmax row of length ``n``; near 0 where it saturates).
  """
  scores = jax.lax.stop_gradient(scores.astype(jnp.float32))
  weights = jax.lax.stop_gradient(weights.astype(jnp.float32))
  # Parameters may be strings (act='relu') or floats as well as arrays.
  params = {k: jax.lax.stop_gradient(v) if isinstance(v, jax.Array) else v
            for k, v in dict(params).items()}
  valid = (jnp.ones(scores.shape, bool) if mask is None
           else jnp.broadcast_to(jnp.asarray(mask, bool), scores.shape))
  n = jnp.sum(valid, axis=-1, keepdims=True).astype(jnp.float32)
  safe_n = jnp.maximum(n, 1.0)
  row_ok = (n[..., 0] > 0).astype(jnp.float32)
  rows = jnp.maximum(jnp.sum(row_ok), 1.0)

  s0 = jnp.where(valid, scores, 0.0)
  mean = jnp.sum(s0, -1, keepdims=True) / safe_n
  var = jnp.sum(jnp.where(valid, (s0 - mean) ** 2, 0.0), -1) / safe_n[..., 0]
  score_std = jnp.sum(jnp.sqrt(var) * row_ok) / rows

  a = jnp.where(valid, jnp.abs(weights), 0.0)
  p = a / jnp.maximum(jnp.sum(a, -1, keepdims=True), 1e-30)
  ent = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0),
                 -1)
  attn_entropy = jnp.sum(ent * row_ok) / rows

  s_sub, v_sub = _slice_rows(scores, valid)
  fn = lambda s: normalizer(s, mask=v_sub, **params).astype(jnp.float32)
  diag = jacobian_diagonal(fn, s_sub)
  n_sub = jnp.sum(v_sub, -1, keepdims=True).astype(jnp.float32)
  sat = jnp.logical_and(v_sub, jnp.abs(diag) < 1e-3 / jnp.maximum(n_sub, 1.0))
  grad_saturation = jnp.sum(sat) / jnp.maximum(jnp.sum(v_sub), 1)
  out = dict(score_std=score_std, attn_entropy=attn_entropy,
             grad_saturation=grad_saturation.astype(jnp.float32))
  out.update(_masked_quantiles(s_sub, v_sub, "score"))
  out.update(_masked_quantiles(jnp.abs(diag) * n_sub, v_sub, "lgrad"))
  return out


def sow_diagnostics(module, scores, weights, normalizer, params, mask=None):
  """Sows ``attention_diagnostics`` into ``module``'s ``diagnostics``."""
  for name, value in attention_diagnostics(scores, weights, normalizer, params,
                                           mask).items():
    module.sow("diagnostics", name, value)
