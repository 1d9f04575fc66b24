"""The `Normalizer` type: one object per attention normalizer.

A normalizer maps a row of scores ``s`` (shape ``[..., n]``) to weights ``w`` of the
same shape. Most normalizers in the spec share one structure, which is what lets
attention stream them over key blocks (see ``softattn.attention``):

1. optional per-row statistics over the *unmasked* keys (``RowStats``: the count
   ``n`` and, when needed, the mean and biased variance);
2. an elementwise ``transform`` ``t = T(s, stats, **params)``;
3. a ``mode`` saying how ``t`` becomes weights, one entry of the table in
   ``softattn.modes`` that the dense, chunked and fused paths all run:

   ============  ==========================================  =====================
   mode          weights                                     streamed with
   ============  ==========================================  =====================
   ``exp``       ``exp(t) / sum exp(t)``                      running max
   ``ratio``     ``g / (sum g + eps)`` with ``g = t``         plain sums
   ``pointwise`` ``t`` itself                                 plain sums
   ``softpick``  ``relu(e^t - 1) / (sum |e^t - 1| + eps)``    running max (>= 0)
   ``rowwise``   any function of the whole row (``row_fn``)   ``stream``, if declared
   ============  ==========================================  =====================

   Also ``exp_sink`` (``exp(t) / (exp(sink) + sum exp(t))``, the sink logit in
   the mode's scalar slot ``eps_param``) and ``signed_exp`` (``sign(t)
   exp(|t|) / sum exp(|t|)``), both streamed with a running max.

A ``rowwise`` normalizer may declare a ``stream`` (``softattn.streams``): how
the chunked path computes it in several passes over key blocks (sparsemax and
entmax's threshold search, stick-breaking's reverse scan); its ``transform``
then maps scores to what the stream reads (the identity unless composed, as
``prenorm``'s standardisation).

Everything the rest of the library knows about a normalizer is in its
declaration: which parameters a layer learns and how (``learnable``), when it
is linear in the scores (``linear_coef``, ``linear_if``), its one-line
formula and source for the README's table (``formula``, ``source``).

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

from softattn import modes as modes_lib
from softattn.modes import masked, safe_denominator  # noqa: F401 (re-export)
from softattn.normalizers import domains as domains_lib

ROWWISE = "rowwise"  # any function of the whole row: dense only


def mode_names() -> tuple[str, ...]:
  """Every mode a declaration may name: the table's, and ``rowwise``."""
  return tuple(modes_lib.MODES) + (ROWWISE,)


MODES = mode_names()  # as of import; ``mode_names()`` sees entries added later
NEEDS = ("none", "count", "moments")


class Learnable(NamedTuple):
  """How ``softattn.nn.MultiHeadAttention`` learns a parameter: ``shape`` is
  ``"scalar"`` (one value) or ``"per_head"`` (``[heads, 1, 1]``, broadcast
  against ``[B, H, Lq, Lk]`` scores), ``init`` its initial value. Learned
  unless a spec string fixes it (``"nap(g=1.0)"``)."""
  shape: str
  init: float


LEARNABLE_SHAPES = ("scalar", "per_head")


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
    stream: for ``rowwise`` normalizers, a ``softattn.streams.Stream`` that
      the chunked path runs over key blocks (None: dense only).
    linear_coef: if the weights are ``coef(n, **params) * s`` (linear in the
      scores), the function giving ``coef``; enables the ``linear`` path.
    linear_if: ``linear_if(**params) -> bool`` when the weights are linear
      only for some parameter values (relu_seqlen: ``act == "identity"``);
      None: always, given ``linear_coef``.
    exp_upper: for ``exp`` mode, an optional ``upper(**params)`` bound on ``t``
      that replaces the running max.
    eps_param: name of the parameter holding the mode's scalar: the
      ``ratio``/``softpick`` epsilon, or ``exp_sink``'s sink logit.
    is_distribution: whether weights sum to 1 over unmasked keys.
    default_scale: score scale that attention uses when the caller gives none;
      ``None`` means ``1/sqrt(head_dim)``.
    domains: each parameter's valid values (``domains.Domain``), checked by
      ``bind`` and on every call; listed at the end of the docstring.
    learnable: parameters ``MultiHeadAttention`` learns, ``{name:
      Learnable(shape, init)}``; a required parameter not listed here must be
      fixed in the spec string.
    formula: the weights in one line of Markdown (README's table).
    source: the paper, short (README's table).
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
  linear_if: Callable[..., bool] | None = None
  stream: Any = None
  learnable: Mapping[str, Learnable] = dataclasses.field(default_factory=dict)
  formula: str = ""
  source: str = ""
  doc: str = ""

  def __post_init__(self):
    if self.mode not in mode_names():
      raise ValueError(f"mode {self.mode!r} is not one of {mode_names()}")
    if self.needs not in NEEDS:
      raise ValueError(f"needs {self.needs!r} is not one of {NEEDS}")
    for what, keys in (("domains", self.domains),
                       ("learnable", self.learnable)):
      undeclared = sorted(set(keys) - set(self.defaults))
      if undeclared:
        raise ValueError(
            f"{self.name}: {what} for unknown parameters {undeclared}")
    for k, how in self.learnable.items():
      if how.shape not in LEARNABLE_SHAPES:
        raise ValueError(f"{self.name}: learnable {k!r} has shape "
                         f"{how.shape!r}; use one of {LEARNABLE_SHAPES}")
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
    return self.mode != ROWWISE or self.stream is not None

  @property
  def is_linear(self) -> bool:
    """Whether the weights are ``coef(n) * s`` with the bound parameters."""
    if self.linear_coef is None:
      return False
    return self.linear_if is None or bool(
        self.linear_if(**{**self.defaults, **self.params}))

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
    if self.mode == ROWWISE:
      if valid is None:
        valid = jnp.ones(s.shape, bool)
      w = masked(valid, self.row_fn(s, valid, **p), 0.0)
    else:
      stats = row_stats(s, valid, self.needs)
      t = self.transform(s, stats, **p)
      # Every mode zeroes masked numerators before its row sums, so no
      # select after the division: on TPU one there cost the masked softmax
      # fwd+bwd 70 % more HBM traffic (tests/test_dense_tpu_traffic.py).
      w = self.weights_from_transform(t, valid, p)
    return w.astype(scores.dtype)

  def weights_from_transform(self, t, valid, p):
    """The weights of whole rows of ``t``: the mode's single-block case."""
    return modes_lib.weights(self.mode, t, valid, self.eps(p), self.upper(p))

  def eps(self, p: Mapping[str, Any]) -> float:
    """The mode's scalar among resolved parameters ``p`` (the ``ratio``/
    ``softpick`` epsilon, ``exp_sink``'s sink logit); 0 if none."""
    return p[self.eps_param] if self.eps_param else 0.0

  def upper(self, p: Mapping[str, Any]):
    """The ``exp_upper`` bound for resolved parameters ``p``, or None."""
    return None if self.exp_upper is None else self.exp_upper(**p)

  def __repr__(self):
    if not self.params:
      return f"Normalizer({self.name})"
    args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
    return f"Normalizer({self.name}({args}))"


class _Required:
  def __repr__(self):
    return "REQUIRED"


REQUIRED = _Required()
