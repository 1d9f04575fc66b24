"""``w = g(s) / sum g(s)`` with a positive ``g`` other than ``exp``: StableMax and
length-scaled softplus attention (LSSA, and its re-weighted form LSSAR).

StableMax is ``ratio`` mode: ``g`` grows at most linearly and decays as
``1/|s|``, so plain sums of ``g v`` and ``g`` stream it. LSSA's ``g =
softplus(.)^p`` decays as ``e^{p y}``: it underflows to 0 for every key of a
row of negative scores (``y < -104`` in float32, ``-745`` in float64), which
would leave a ``0/0`` row. So LSSA is written as ``softmax(p log softplus(y))``
(``exp`` mode, streamed with a running max): the same weights, exact at any
score size.
"""

import jax
import jax.numpy as jnp

from softattn.normalizers.core import REQUIRED, Normalizer
from softattn.normalizers.domains import EPS, POSITIVE, Domain


def _stablemax(s, stats, *, eps):
  # Double where: 1/(1 - s) is only evaluated (and differentiated) for s < 0.
  neg = s < 0
  return jnp.where(neg, 1.0 / (1.0 - jnp.where(neg, s, 0.0)), s + 1.0)


stablemax = Normalizer(
    name="stablemax", mode="ratio", needs="none", defaults=dict(eps=0.0),
    domains=dict(eps=EPS), transform=_stablemax, eps_param="eps",
    formula="`g/Σg`, g = s+1 (s ≥ 0), 1/(1-s) (s < 0)",
    source="Prieto et al. 2025, arXiv 2501.04697",
    doc=r"""StableMax (Prieto et al. 2025, arXiv 2501.04697).

    ``w_i = g(s_i) / sum_j g(s_j)`` with ``g(x) = x + 1`` for ``x >= 0`` and
    ``1 / (1 - x)`` for ``x < 0``: continuous with slope 1 at 0, linear
    growth instead of exponential, so large scores cannot absorb the small
    ones in floating point ("softmax collapse"). Form confirmed in the
    authors' code (``s(x)``, ``log_stablemax``); the paper uses it in the
    loss, applying it to attention is this library's. The paper's section
    and equation number were not checked against its text. ``g > 0``, so no
    eps is needed (default 0).
    """)


def log_softplus(y):
  """``log(softplus(y))``, finite for every finite ``y``.

  For ``y < 0``, ``softplus(y) = e^y r`` with ``r = log1p(e^y) / e^y`` in
  ``(log 2, 1]``, so ``log softplus(y) = y + log r``; when ``e^y`` is tiny
  (or has underflowed, where ``log1p(e)/e`` is ``0/0``) ``r`` is its series
  ``1 - e/2 + e^2/3``, whose first dropped term is below ``e^3/4``.
  Both ``where``s are doubled so the branch not taken is never
  differentiated at a point where it is undefined.
  """
  neg = y < 0
  e = jnp.exp(jnp.where(neg, y, 0.0))
  small = e < 1e-4
  e_big = jnp.where(small, 1.0, e)
  r = jnp.where(small, 1.0 - e / 2 + e * e / 3, jnp.log1p(e_big) / e_big)
  pos = jnp.log(jax.nn.softplus(jnp.where(neg, 0.0, y)))
  return jnp.where(neg, jnp.where(neg, y, 0.0) + jnp.log(r), pos)


def _log_softplus_power(s, stats, *, power, kappa):
  n = jnp.maximum(stats.n, 1.0)
  return power * log_softplus(kappa * jnp.log(n) * s)


_LSSA_DOC = r"""(Gao, Spratling & Gionfrida, arXiv 2501.13428).

    ``g = softplus(kappa log(n) s)^power``, ``w = g / sum g`` over the ``n``
    unmasked keys of the row (``n`` grows with the causal position).

    What the paper's text confirms (its abstract, v2, v4 and v5): softmax is
    read as a positive map followed by l1-normalisation; LSSA keeps the
    l1-normalisation, replaces ``exp`` by Softplus and adds "a dynamic scale
    factor based on invariance entropy"; LSSAR adds a second stage,
    "re-weighting", that "amplifies significant attentional weights while
    diminishing weaker ones" (v2 calls it "fine-tuning-free": applied to a
    model trained with LSSA). Summaries of the paper describe the scale as
    row-dependent and the re-weighting as a power function.

    *Inferred*, and parameters here for that reason: the method section's
    equations could not be read (the stored copies of the paper searched for
    this gave back only its abstract and introduction), so no section or
    equation number is cited.
    The scale is ``kappa log n`` with the row's own ``n``: ``kappa = 1``
    (default) is ``log n``; ``kappa = 1 / log(L_train)`` is the other common
    entropy-invariance form, 1 at the training length. Whether the paper
    also keeps ``1/sqrt(d)`` on the scores is attention's ``scale`` (default
    ``1/sqrt(d)``; pass ``scale=1.0`` to drop it). The re-weighting is read
    as a plain power of the weights, re-normalised, which equals ``g^power /
    sum g^power`` and so still streams in one pass (``softmax(power log
    softplus(.))``, see the module docstring); an
    offset or ReLU before the power, if the paper has one, is not modelled.
"""

lssa = Normalizer(
    name="lssa", mode="exp", needs="count",
    defaults=dict(power=1.0, kappa=1.0), transform=_log_softplus_power,
    domains=dict(power=Domain(lo=0.0, lo_open=True, hi=16.0),
                 kappa=POSITIVE),
    formula="`g/Σg`, g = softplus(κ·log n·s)^p, κ = p = 1 (*inferred* form)",
    source="Gao et al. 2025, arXiv 2501.13428",
    doc="Length-scaled softplus attention, LSSA " + _LSSA_DOC + r"""
    ``power`` defaults to 1 (plain LSSA).
    """)

lssar = Normalizer(
    name="lssar", mode="exp", needs="count",
    defaults=dict(power=REQUIRED, kappa=1.0),
    transform=_log_softplus_power,
    domains=dict(power=Domain(lo=1.0, hi=16.0,
                              note="the re-weighting sharpens"),
                 kappa=POSITIVE),
    formula="`g/Σg`, g = softplus(κ·log n·s)^p, p > 1 given (*inferred* form)",
    source="Gao et al. 2025, arXiv 2501.13428",
    doc="LSSA with re-weighting, LSSAR " + _LSSA_DOC + r"""
    ``power`` has no default: the paper's value was not confirmed, so a spec
    must give it, e.g. ``"lssar(power=3)"``.
    """)
