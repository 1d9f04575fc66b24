"""Per-layer attention diagnostics: score std, weight entropy, saturation;
and sink diagnostics per layer and head (top key, its value, output rank,
token norms).

These are the quantities the seed papers plot: the std of the normalizer's
input (NormSoftmax, Jiang et al. 2023, Fig. 2), the entropy of the attention
weights (Fig. 4), and how much of the normalizer's gradient is saturated (the
periodic paper's gradient plots, Wang et al. 2021). They need the dense
``[B, H, Lq, Lk]`` scores, so layers compute them only when the caller makes
the ``diagnostics`` collection mutable (at log steps).

Sink diagnostics (``sink_statistics``, ``token_norm_statistics``,
``summarize_sinks``) say whether a head has an attention sink and of which
kind: how much of its weight goes to one key, whether that key is the class
token, a register or a patch, whether the key's value is negligible (a
"no-op" sink, which an output gate can replace) or the head's output is low
rank (a "broadcast" sink, which registers absorb; the two kinds of arXiv
2606.08105), and how large the
residual stream's high-norm tokens are (Darcet et al. 2023, "Vision
Transformers Need Registers", arXiv 2309.16588). Layers sow them into the
``sinks`` collection when it is mutable, which the training loop does at
eval steps on a fixed probe batch (``softattn.steps.sinks_step``).
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


# ----------------------------------------------------------------------------
# Sink diagnostics: where a head's weight goes, what it reads there, and what
# the residual stream's high-norm tokens are.
#
# Layers sow them into the ``sinks`` collection when the caller makes it
# mutable (``softattn.steps.sinks_step``, at eval steps on a fixed probe
# batch): per example, so that the summary can weight examples by the eval
# batch's mask and count token kinds. ``summarize_sinks`` turns the collection
# into one scalar per layer and head.

SINKS = "sinks"
# Token kinds (``token_kind`` codes a model sows next to its layers): the
# class token, a register (Darcet et al. 2023, arXiv 2309.16588), a patch.
CLS, REGISTER, PATCH = 0, 1, 2
TOKEN_KINDS = ("cls", "register", "patch")
# Examples of the eval split's first batch the sink diagnostics look at.
PROBE_EXAMPLES = 16


def wants_sinks(module) -> bool:
  """True when the caller made ``sinks`` mutable (never at init)."""
  return (not module.is_initializing()
          and module.is_mutable_collection(SINKS))


def effective_rank(x):
  """``exp(-sum p_i log p_i)`` with ``p = sigma / sum(sigma)``, the singular
  values of each ``[..., m, n]`` matrix (Roy & Vetterli 2007): ``k`` for ``k``
  equal non-zero singular values, 1 for a rank-one matrix (every row a
  multiple of one vector, such as a head whose queries all read the same
  value), 0 for the zero matrix. Uncentred, in float32."""
  s = jnp.linalg.svd(x.astype(jnp.float32), compute_uv=False)
  total = jnp.sum(s, -1, keepdims=True)
  p = s / jnp.where(total > 0, total, 1.0)
  ent = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0),
                 -1)
  return jnp.where(total[..., 0] > 0, jnp.exp(ent), 0.0)


def sink_statistics(weights, values, outputs, mask=None):
  """Per example and head, what a head's top key is and what it outputs.

  Args:
    weights: ``[B, H, Lq, Lk]`` attention weights (any normalizer).
    values: ``[B, Lk, H, Dv]`` the head's values.
    outputs: ``[B, Lq, H, Do]`` the head's output before the output
      projection (after any output gate, gated unit or differential norm:
      what the head adds to the residual stream, up to its slice of ``out``).
    mask: optional boolean mask broadcastable to ``weights``.

  Returns:
    dict of ``[B, H]`` arrays:

    * ``top_key_index``: the key ``k*`` with the largest column sum of
      ``|w|`` over the queries (int32): the key the head attends to most.
    * ``top_key_share``: ``sum_q |w_qk*| / sum_qk |w_qk|``, the share of the
      head's total attention weight that lands on ``k*`` (for a softmax, the
      mean over queries of ``w_qk*``; 1 when every query attends only to
      ``k*``, ``1/Lk`` for uniform attention). ``|w|`` makes it defined for
      normalizers whose rows do not sum to 1 or take negative values.
    * ``top_key_vnorm``: ``||v_k*||_2``, the L2 norm of ``k*``'s value.
    * ``top_key_vnorm_ratio``: ``||v_k*|| / mean_k ||v_k||`` over the valid
      keys; near 0 for a "no-op" sink, whose value carries nothing.
    * ``out_erank``: ``effective_rank`` of the head's output ``[Lq, Do]``;
      near 1 when every query gets the same output (a "broadcast" sink).
  """
  w = jnp.abs(jax.lax.stop_gradient(weights).astype(jnp.float32))
  if mask is not None:
    valid = jnp.broadcast_to(jnp.asarray(mask, bool), w.shape)
    w = jnp.where(valid, w, 0.0)
    key_ok = jnp.any(valid, axis=2)                        # [B, H, Lk]
  else:
    key_ok = jnp.ones((w.shape[0], w.shape[1], w.shape[3]), bool)
  col = jnp.sum(w, axis=2)                                 # [B, H, Lk]
  idx = jnp.argmax(jnp.where(key_ok, col, -1.0), axis=-1)  # [B, H]
  take = lambda a: jnp.take_along_axis(a, idx[..., None], -1)[..., 0]
  share = take(col) / jnp.maximum(jnp.sum(col, -1), 1e-30)
  v = jax.lax.stop_gradient(values).astype(jnp.float32)
  vnorm = jnp.moveaxis(jnp.linalg.norm(v, axis=-1), 1, 2)  # [B, H, Lk]
  vmean = (jnp.sum(jnp.where(key_ok, vnorm, 0.0), -1)
           / jnp.maximum(jnp.sum(key_ok, -1), 1))
  top_vnorm = take(vnorm)
  o = jnp.moveaxis(jax.lax.stop_gradient(outputs), 1, 2)  # [B, H, Lq, Do]
  return dict(top_key_index=idx.astype(jnp.int32), top_key_share=share,
              top_key_vnorm=top_vnorm,
              top_key_vnorm_ratio=top_vnorm / jnp.maximum(vmean, 1e-30),
              out_erank=effective_rank(o))


def token_norm_statistics(x):
  """Per example, the residual stream's token norms ``||x_t||_2``.

  Args:
    x: ``[B, L, D]`` a block's output (the residual stream after it).

  Returns:
    dict of ``[B]`` arrays: ``token_norm_max`` (the largest token norm: the
    "high-norm tokens" of Darcet et al. 2023), ``token_norm_argmax`` (which
    token, int32) and ``token_norm_median`` (the typical token, for scale).
  """
  n = jnp.linalg.norm(jax.lax.stop_gradient(x).astype(jnp.float32), axis=-1)
  return dict(token_norm_max=jnp.max(n, -1),
              token_norm_argmax=jnp.argmax(n, -1).astype(jnp.int32),
              token_norm_median=jnp.median(n, -1))


def sow_sinks(module, stats: dict) -> None:
  """Sows ``stats`` into ``module``'s ``sinks`` collection."""
  for name, value in stats.items():
    module.sow(SINKS, name, value)


def sow_token_kinds(module, kinds) -> None:
  """Sows ``token_kind`` (codes ``CLS``/``REGISTER``/``PATCH`` of the tokens
  that ``module``'s layers see) when ``sinks`` is mutable; the layers below
  ``module`` are summarised against it (``summarize_sinks``)."""
  if wants_sinks(module):
    module.sow(SINKS, "token_kind", jnp.asarray(kinds, jnp.int32))


def _first(leaf):
  # sow keeps a tuple per name (one entry per call): the first call's.
  return leaf[0] if isinstance(leaf, tuple) else leaf


def _unstacked(path: tuple[str, ...], i: int) -> tuple[str, ...]:
  """The name of layer ``i`` of an ``nn.scan`` stack at ``path``: ``_i`` on
  the deepest module name that has no ``_<n>`` suffix of its own
  (``Transformer/encoderblock/MultiHeadDotProductAttention_0`` ->
  ``Transformer/encoderblock_3/MultiHeadDotProductAttention_0``, the name
  of the same layer unrolled)."""
  for j in range(len(path) - 1, -1, -1):
    head, _, tail = path[j].rpartition("_")
    if not (head and tail.isdigit()):
      return path[:j] + (f"{path[j]}_{i}",) + path[j + 1:]
  return path + (str(i),)


def summarize_sinks(tree, example_weight=None) -> dict:
  """One float32 scalar per layer (and head) from a ``sinks`` collection.

  Each statistic is averaged over the examples (weighted by
  ``example_weight`` ``[B]``, e.g. the eval batch's mask). Keys, with
  ``<layer>`` the attention module's path (a scanned stack's layers as
  ``encoderblock_<i>``, as unrolled) and ``h<j>`` the head:

  * ``<layer>/h<j>/top_key_share``, ``top_key_vnorm``,
    ``top_key_vnorm_ratio``, ``out_erank``: means of ``sink_statistics``;
  * ``<layer>/h<j>/top_key_cls``, ``top_key_register``, ``top_key_patch``:
    the fraction of examples whose top key is of that kind (from the
    ``token_kind`` the nearest enclosing module sowed; absent without one);
  * ``<block>/token_norm_max``, ``token_norm_median`` and
    ``token_norm_max_cls``/``_register``/``_patch`` for each block that
    sowed ``token_norm_statistics``.
  """
  out = {}

  def mean(x):  # x [B, ...] -> [...]
    x = jnp.asarray(x, jnp.float32)
    if example_weight is None:
      return jnp.mean(x, 0)
    wt = jnp.asarray(example_weight, jnp.float32).reshape(
        (-1,) + (1,) * (x.ndim - 1))
    return jnp.sum(x * wt, 0) / jnp.maximum(jnp.sum(wt), 1.0)

  def kind_fractions(idx, kinds, prefix):  # idx [B, ...] -> {name: [...]}
    if kinds is None:
      return {}
    onehot = jax.nn.one_hot(jnp.take(kinds, idx), len(TOKEN_KINDS))
    frac = mean(onehot)
    return {f"{prefix}{name}": frac[..., c]
            for c, name in enumerate(TOKEN_KINDS)}

  def emit(path, node, kinds):
    label = "/".join(path)
    if "top_key_index" in node:
      idx = _first(node["top_key_index"])
      stats = {k: mean(_first(node[k])) for k in
               ("top_key_share", "top_key_vnorm", "top_key_vnorm_ratio",
                "out_erank")}
      stats.update(kind_fractions(idx, kinds, "top_key_"))
      for k, v in stats.items():
        for h in range(v.shape[-1]):
          out[f"{label}/h{h}/{k}"] = v[h]
    if "token_norm_max" in node:
      idx = _first(node["token_norm_argmax"])
      out[f"{label}/token_norm_max"] = mean(_first(node["token_norm_max"]))
      out[f"{label}/token_norm_median"] = mean(
          _first(node["token_norm_median"]))
      for k, v in kind_fractions(idx, kinds, "token_norm_max_").items():
        out[f"{label}/{k}"] = v

  def walk(path, node, kinds):
    if "token_kind" in node:
      kinds = _first(node["token_kind"])
    stacked_ndim = {"top_key_index": 3, "token_norm_argmax": 2}
    stack = [k for k, nd in stacked_ndim.items()
             if k in node and _first(node[k]).ndim == nd]
    if stack:  # an nn.scan stack: one layer per leading index
      depth = _first(node[stack[0]]).shape[0]
      for i in range(depth):
        layer = {k: jax.tree.map(lambda a, i=i: a[i], _first(v))
                 for k, v in node.items() if not hasattr(v, "items")}
        emit(_unstacked(path, i), layer, kinds)
    else:
      emit(path, node, kinds)
    for k, v in node.items():
      if hasattr(v, "items"):
        walk(path + (str(k),), v, kinds)

  walk((), tree, None)
  return out
