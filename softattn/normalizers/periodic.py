"""Periodic alternatives to softmax (Wang et al. 2021), Taylor softmax, and the
pre-normalisation that composes with any normalizer.

The generic periodic form is ``w_i = g(s_i) / (sum_j g(s_j) + eps)``.
"""

import dataclasses
import math

import jax.numpy as jnp

from softattn.normalizers.core import Normalizer, RowStats, row_stats
from softattn.normalizers.domains import EPS, POSITIVE, REAL

_PERIODIC_DEFAULTS = dict(freq=1.0, eps=1e-6)
# freq > 0 is *inferred*: a negative one only mirrors g, and 0 makes g constant.
_PERIODIC_DOMAINS = dict(freq=POSITIVE, eps=EPS)


def _periodic(name, g, g_text, doc):
  return Normalizer(
      name=name, mode="ratio", needs="none", defaults=dict(_PERIODIC_DEFAULTS),
      domains=_PERIODIC_DOMAINS,
      transform=lambda s, stats, *, freq, eps: g(freq * s), eps_param="eps",
      formula=f"`g/(Σg + eps)`, g = {g_text}", source="Wang et al. 2021",
      doc=doc + """
    ``freq`` multiplies the scores inside ``g`` (default 1); ``eps`` guards the
    division: the denominator is ``sum g + eps``, pushed to ``-eps`` side if the
    sum is negative (only possible when ``g`` can be negative).
    """)


sin_max = _periodic("sin_max", jnp.sin, "sin(s)", r"""Sin-max: ``g = sin(s)`` (Wang et al. 2021).

    ``g`` can be negative and the row sum can cross 0, so weights can be
    huge or negative: the paper reports it breaks down. Kept for the ablation.""")

sin_max_constant = _periodic(
    "sin_max_constant", lambda x: 1.0 + jnp.sin(x), "1 + sin(s)",
    r"""Sin-max-constant: ``g = 1 + sin(s)`` (Wang et al. 2021).

    The authors' demo code used ``1 + sin(10 s)``: write
    ``sin_max_constant(freq=10)``. Reported to break down.""")

cos_max = _periodic("cos_max", jnp.cos, "cos(s)", r"""Cos-max: ``g = cos(s)`` (Wang et al. 2021).

    Plain cos, no constant, as the authors' code ("works with pre-norm").
    Reported to break down without pre-norm.""")

sin2_max = _periodic("sin2_max", lambda x: jnp.square(jnp.sin(x)), "sin²(s)",
                     r"""Sin²-max: ``g = sin²(s)`` (Wang et al. 2021).

    Its gradient is 0 at ``s = 0``, where scores start: reported to break
    down without pre-norm.""")

sin2_max_shifted = _periodic(
    "sin2_max_shifted", lambda x: jnp.square(jnp.sin(x + math.pi / 4)),
    "sin²(s + π/4)",
    r"""Sin²-max-shifted: ``g = sin²(s + pi/4)`` (Wang et al. 2021).

    The pi/4 phase (confirmed) gives slope 1 at ``s = 0``.""")


def _siren(s, stats, *, freq, eps):
  sin = jnp.sin(freq * s)
  return (1.0 + sin) / (2.0 - 2.0 * sin + eps)


siren_max = Normalizer(
    name="siren_max", mode="ratio", needs="none",
    defaults=dict(_PERIODIC_DEFAULTS), transform=_siren, eps_param="eps",
    domains=_PERIODIC_DOMAINS,
    formula="`g/(Σg + eps)`, g = (1 + sin s)/(2 - 2 sin s)", source="Wang et al. 2021",
    doc=r"""Siren-max: ``g = (1 + sin s) / (2 - 2 sin s)`` (Wang et al. 2021).

    Form confirmed in the authors' code. Unbounded at ``s = pi/2 + 2 k pi``:
    ``eps`` is added to its denominator as well as to the row sum; the
    gradient has jump points. Reported to break down without pre-norm.
    """)


def _sin_softmax(s, stats, *, freq, post_scale):
  return post_scale * jnp.sin(freq * s)


sin_softmax = Normalizer(
    name="sin_softmax", mode="exp", needs="none",
    defaults=dict(freq=1.0, post_scale=1.0), transform=_sin_softmax,
    domains=dict(freq=POSITIVE, post_scale=REAL),
    exp_upper=lambda *, freq, post_scale: abs(post_scale),
    formula="`softmax(sin s)`", source="Wang et al. 2021",
    doc=r"""Sin-softmax: ``w = softmax(post_scale * sin(freq * s))`` (Wang et al. 2021).

    The weights' max/min ratio is at most ``e^2``. ``sin <= 1`` bounds the
    exponent, so no running max is needed. The authors' demo applied ``sin``
    *before* the ``1/sqrt(d)``: reproduce it with attention ``scale=1`` and
    ``post_scale=1/sqrt(d)``.
    """)


taylor_softmax = Normalizer(
    name="taylor_softmax", mode="ratio", needs="none", defaults=dict(eps=0.0),
    domains=dict(eps=EPS),
    transform=lambda s, stats, *, eps: 1.0 + s + 0.5 * s * s, eps_param="eps",
    formula="`(1+s+s²/2)/Σ`", source="de Brébisson & Vincent 2016",
    doc=r"""Second-order Taylor softmax (de Brébisson & Vincent 2016).

    ``g = 1 + s + s²/2 >= 1/2``, ``w = g / sum g``; no eps needed (default 0).
    """)


def _unbiased_var(stats):
  n = stats.n
  return stats.var * n / jnp.maximum(n - 1.0, 1.0)


def make_prenorm(inner: Normalizer, eps: float = 1e-5) -> Normalizer:
  """``prenorm(f)``: ``f((s - mean(s)) / sqrt(var(s) + eps))``.

  The "norm-*" variants of Wang et al. 2021: the authors standardise each
  head's score row with the *unbiased* variance and ``eps = 1e-5``. Works for
  any normalizer, softmax included. Streaming stays possible because the
  standardised row's own statistics follow from the raw ones: its mean is 0
  and its biased variance is ``var_b / (var_u + eps)``.
  """
  def normalize(s, stats):
    return (s - stats.mean) / jnp.sqrt(_unbiased_var(stats) + eps)

  def inner_stats(stats):
    if inner.needs != "moments":
      return RowStats(stats.n)
    var = stats.var / (_unbiased_var(stats) + eps)
    return RowStats(stats.n, jnp.zeros_like(stats.mean), var)

  name = f"prenorm({inner.name})"
  common = dict(name=name, needs="moments", linear_coef=None,
                doc=make_prenorm.__doc__)
  if inner.mode == "rowwise":
    row_fn = lambda s, valid, **p: inner.row_fn(  # noqa: E731
        jnp.where(valid, normalize(s, row_stats(s, valid, "moments")), 0.0), valid, **p)
    transform = None if inner.transform is None else (
        lambda s, stats, **p: inner.transform(  # noqa: E731
            normalize(s, stats), inner_stats(stats), **p))
    return dataclasses.replace(inner, row_fn=row_fn, transform=transform,
                               **common)
  transform = lambda s, stats, **p: inner.transform(  # noqa: E731
      normalize(s, stats), inner_stats(stats), **p)
  return dataclasses.replace(inner, transform=transform, **common)

