"""The `Normalizer` type: one object per attention normalizer.

A normalizer maps a row of scores ``s`` (shape ``[..., n]``) to weights ``w`` of the
same shape. Most normalizers in the spec share one structure, which is what lets
attention stream them over key blocks (see ``softattn.attention``):

1. optional per-row statistics over the *unmasked* keys (``RowStats``: the count
   ``n`` and, when needed, the mean and biased variance);
2. an elementwise ``transform`` ``t = T(s, stats, **params)``;
3. a ``mode`` saying how ``t`` becomes weights:

   ============  ==========================================  =====================
   mode          weights                                     streamed with
   ============  ==========================================  =====================
   ``exp``       ``exp(t) / sum exp(t)``                      running max
   ``ratio``     ``g / (sum g + eps)`` with ``g = t``         plain sums
   ``pointwise`` ``t`` itself                                 plain sums
   ``softpick``  ``relu(e^t - 1) / (sum |e^t - 1| + eps)``    running max (>= 0)
   ``rowwise``   any function of the whole row                not streamable
   ============  ==========================================  =====================

Masked keys get weight exactly 0 and do not count in ``n``, means or variances; a
fully masked row gives zeros. Internally low-precision inputs are computed in
float32 and the weights are returned in the input dtype.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp

from softattn.normalizers import domains as domains_lib

MODES = ("exp", "ratio", "pointwise", "softpick", "rowwise")
NEEDS = ("none", "count", "moments")


class RowStats(NamedTuple):
  """Per-row statistics over unmasked keys, each shaped ``[..., 1]``.

  ``var`` is the biased (population) variance; normalizers that want the
  unbiased one rescale it by ``n / (n - 1)``.
  """
  n: jax.Array
  mean: jax.Array | None = None
  var: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class SqrtHeadDim:
  """A parameter value ``factor * sqrt(head_dim)``, resolved by attention.

  Written ``sqrt_d``, ``2*sqrt_d`` or ``sqrt_d/2`` in a normalizer spec string,
  e.g. ``"normsoftmax(gamma=sqrt_d)"``: the paper's gamma is a function of the
  head dimension, which only the attention call knows.
  """
  factor: float = 1.0

  def resolve(self, head_dim: int) -> float:
    return self.factor * math.sqrt(head_dim)

  def __repr__(self):
    return "sqrt_d" if self.factor == 1.0 else f"{self.factor!r}*sqrt_d"


def _valid_mask(scores: jax.Array, mask) -> jax.Array:
  if mask is None:
    return jnp.ones(scores.shape, dtype=bool)
  mask = jnp.asarray(mask)
  try:
    return jnp.broadcast_to(mask.astype(bool), scores.shape)
  except ValueError:
    raise ValueError(
        f"mask shape {mask.shape} does not broadcast to scores shape "
        f"{scores.shape}; give a mask broadcastable to [..., n_keys].") from None


def masked(valid, x, fill):
  """``where(valid, x, fill)``; ``valid=None`` means every key is valid.

  The unmasked case skips the selects entirely rather than relying on XLA to
  fold an all-true mask: it is the hot path of every model without padding.
  """
  return x if valid is None else jnp.where(valid, x, fill)


def row_stats(s: jax.Array, valid: jax.Array | None, needs: str) -> RowStats:
  """Count, mean and biased variance of ``s`` over ``valid`` keys (last axis).

  ``valid=None`` means all keys are valid.
  """
  if valid is None:
    n = jnp.full(s.shape[:-1] + (1,), s.shape[-1], s.dtype)
  else:
    n = jnp.sum(valid, axis=-1, keepdims=True).astype(s.dtype)
  if needs != "moments":
    return RowStats(n)
  safe_n = jnp.maximum(n, 1.0)
  mean = jnp.sum(masked(valid, s, 0.0), axis=-1, keepdims=True) / safe_n
  centered = masked(valid, s - mean, 0.0)
  var = jnp.sum(centered * centered, axis=-1, keepdims=True) / safe_n
  return RowStats(n, mean, var)


def merge_stats(a: RowStats, b: RowStats) -> RowStats:
  """Chan et al.'s parallel merge of two partial ``RowStats`` (stable in fp32)."""
  n = a.n + b.n
  if a.mean is None:
    return RowStats(n)
  safe_n = jnp.maximum(n, 1.0)
  delta = b.mean - a.mean
  mean = a.mean + delta * (b.n / safe_n)
  m2 = a.var * a.n + b.var * b.n + delta * delta * (a.n * b.n / safe_n)
  return RowStats(n, mean, m2 / safe_n)


def safe_denominator(den: jax.Array, eps: float) -> jax.Array:
  """``den + eps`` pushed away from 0 on its own side, so ``|result| >= eps``.

  Equal to the spec's ``sum g + eps`` whenever ``sum g >= 0``; for normalizers
  whose ``g`` can be negative (``sin_max``) it guards the division instead of
  producing Inf.
  """
  out = jnp.where(den >= 0, den + eps, den - eps)
  return jnp.where(out == 0, 1.0, out)  # eps=0 and an empty row: 0/1, not 0/0


def exp_weights(t, valid, upper=None):
  """``softmax(t)`` over valid keys; ``upper`` is a known bound on ``t``."""
  if upper is None:
    m = jnp.max(masked(valid, t, -jnp.inf), axis=-1, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
  else:
    m = upper
  # Masked entries are replaced before exp so that neither the value nor its
  # gradient can be Inf/NaN there (the "double where" pattern).
  e = masked(valid, jnp.exp(masked(valid, t, m) - m), 0.0)
  den = jnp.sum(e, axis=-1, keepdims=True)
  return e / jnp.where(den > 0, den, 1.0)


def ratio_weights(g, valid, eps):
  g = masked(valid, g, 0.0)
  return g / safe_denominator(jnp.sum(g, axis=-1, keepdims=True), eps)


def softpick_weights(t, valid, eps):
  # relu(e^t - 1) / (sum |e^t - 1| + eps), numerator and denominator both
  # multiplied by e^-m with m = max(row max, 0) so nothing overflows.
  m = jnp.max(masked(valid, t, -jnp.inf), axis=-1, keepdims=True)
  m = jax.lax.stop_gradient(jnp.maximum(m, 0.0))
  e = jnp.exp(masked(valid, t, 0.0) - m) - jnp.exp(-m)
  num = masked(valid, jax.nn.relu(e), 0.0)
  den = jnp.sum(masked(valid, jnp.abs(e), 0.0), axis=-1, keepdims=True)
  return num / (den + eps * jnp.exp(-m))


def _compute_dtype(dtype):
  return jnp.promote_types(dtype, jnp.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class Normalizer:
  """An attention normalizer: ``weights = normalizer(scores, mask=mask, **params)``.

  Instances are pure callables (jit/grad/vmap-safe) and carry the metadata that
  ``softattn.attention.dot_product_attention`` needs to pick a dense, chunked or
  linear path. ``bind(**params)`` returns a copy with parameters fixed (how a
  spec string such as ``"normsoftmax(gamma=inf)"`` and a layer's learnable
  parameter get attached).

  Attributes:
    name: registry name (``prenorm(...)`` for composed ones).
    mode: one of ``MODES``; see the module docstring.
    transform: ``t = transform(s, stats, **params)``, elementwise given the row
      statistics (``None`` for ``rowwise``).
    needs: ``"none"``, ``"count"`` or ``"moments"``: which ``RowStats`` the
      transform reads.
    defaults: every parameter and its default (``REQUIRED`` if it has none).
    params: parameters bound so far.
    row_fn: for ``rowwise`` normalizers, ``row_fn(s, valid, **params)``.
    linear_coef: if the weights are ``coef(n, **params) * s`` (linear in the
      scores), the function giving ``coef``; enables the ``linear`` path.
    exp_upper: for ``exp`` mode, an optional ``upper(**params)`` bound on ``t``
      that replaces the running max.
    eps_param: name of the parameter holding the ``ratio``/``softpick`` epsilon.
    is_distribution: whether weights sum to 1 over unmasked keys.
    default_scale: score scale that attention uses when the caller gives none;
      ``None`` means ``1/sqrt(head_dim)``.
    domains: each parameter's valid values (``domains.Domain``), checked by
      ``bind`` and on every call; listed at the end of the docstring.
    doc: the docstring shown by ``help``.
  """
  name: str
  mode: str
  transform: Callable[..., jax.Array] | None
  needs: str
  defaults: Mapping[str, Any]
  params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  row_fn: Callable[..., jax.Array] | None = None
  linear_coef: Callable[..., jax.Array] | None = None
  exp_upper: Callable[..., Any] | None = None
  eps_param: str | None = None
  is_distribution: bool = True
  default_scale: float | None = None
  domains: Mapping[str, domains_lib.Domain] = dataclasses.field(
      default_factory=dict)
  doc: str = ""

  def __post_init__(self):
    if self.mode not in MODES:
      raise ValueError(f"mode {self.mode!r} is not one of {MODES}")
    if self.needs not in NEEDS:
      raise ValueError(f"needs {self.needs!r} is not one of {NEEDS}")
    undeclared = sorted(set(self.domains) - set(self.defaults))
    if undeclared:
      raise ValueError(f"{self.name}: domains for unknown parameters {undeclared}")
    doc = self.doc
    table = domains_lib.describe(self.domains)
    if table and table not in doc:
      doc = doc.rstrip() + "\n" + table
    object.__setattr__(self, "doc", doc)
    object.__setattr__(self, "__doc__", doc)

  # -- parameters -------------------------------------------------------------
  def bind(self, **params) -> "Normalizer":
    """Returns a copy with ``params`` fixed; unknown names raise ValueError."""
    self._check_names(params)
    self._check_domains(params)
    return dataclasses.replace(self, params={**self.params, **params})

  def _check_names(self, params):
    unknown = sorted(set(params) - set(self.defaults))
    if unknown:
      valid = ", ".join(sorted(self.defaults)) or "none"
      raise ValueError(
          f"normalizer {self.name!r} has no parameter(s) {unknown}; valid "
          f"parameters: {valid}.")

  def _check_domains(self, params):
    for k, v in params.items():
      if k in self.domains and v is not REQUIRED:
        self.domains[k].check(self.name, k, v)

  def resolve(self, params: Mapping[str, Any] | None = None,
              head_dim: int | None = None) -> dict[str, Any]:
    """All parameter values: defaults < bound < ``params``; checks required."""
    params = dict(params or {})
    self._check_names(params)
    out = {**self.defaults, **self.params, **params}
    missing = [k for k, v in out.items() if v is REQUIRED]
    if missing:
      raise ValueError(
          f"normalizer {self.name!r} needs parameter(s) {missing} (learnable: "
          f"pass them as keyword arguments or bind them, e.g. "
          f"get({self.name!r}).bind({missing[0]}=...)).")
    for k, v in out.items():
      if isinstance(v, SqrtHeadDim):
        if head_dim is None:
          raise ValueError(
              f"{self.name}: parameter {k}={v!r} depends on the head dim; call "
              f"through dot_product_attention or pass head_dim=.")
        out[k] = v.resolve(head_dim)
    self._check_domains(out)
    return out

  @property
  def streamable(self) -> bool:
    """Whether attention can stream this normalizer over key blocks."""
    return self.mode != "rowwise"

  @property
  def is_linear(self) -> bool:
    return self.linear_coef is not None and self._linear_ok()

  def _linear_ok(self) -> bool:
    # relu_seqlen is linear only with act='identity'.
    p = {**self.defaults, **self.params}
    return p.get("act", "identity") == "identity"

  # -- evaluation -------------------------------------------------------------
  def __call__(self, scores, *, mask=None, head_dim: int | None = None,
               **params):
    """Weights for ``scores`` (last axis = keys); see the class docstring."""
    scores = jnp.asarray(scores)
    p = self.resolve(params, head_dim)
    valid = None if mask is None else _valid_mask(scores, mask)
    s = scores.astype(_compute_dtype(scores.dtype))
    # Masked scores may be -inf or NaN (e.g. from a bias); they must not leak
    # into statistics, transforms or gradients.
    s = masked(valid, s, 0.0)
    if self.mode == "rowwise":
      if valid is None:
        valid = jnp.ones(s.shape, bool)
      w = self.row_fn(s, valid, **p)
    else:
      stats = row_stats(s, valid, self.needs)
      t = self.transform(s, stats, **p)
      w = self.weights_from_transform(t, valid, p)
    return masked(valid, w, 0.0).astype(scores.dtype)

  def weights_from_transform(self, t, valid, p):
    if self.mode == "exp":
      upper = None if self.exp_upper is None else self.exp_upper(**p)
      return exp_weights(t, valid, upper)
    if self.mode == "ratio":
      return ratio_weights(t, valid, p[self.eps_param])
    if self.mode == "softpick":
      return softpick_weights(t, valid, p[self.eps_param])
    return masked(valid, t, 0.0)  # pointwise

  def __repr__(self):
    if not self.params:
      return f"Normalizer({self.name})"
    args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
    return f"Normalizer({self.name}({args}))"


class _Required:
  def __repr__(self):
    return "REQUIRED"


REQUIRED = _Required()
