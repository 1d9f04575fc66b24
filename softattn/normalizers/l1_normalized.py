"""``w = g(s) / sum g(s)`` with a positive ``g`` other than ``exp``: StableMax and
length-scaled softplus attention (LSSA, and its re-weighted form LSSAR).

Both are ``ratio`` mode: no running max is needed (``g`` grows at most
polynomially), so they stream with plain sums of ``g v`` and ``g``.
"""

import jax
import jax.numpy as jnp

from softattn.normalizers.core import REQUIRED, Normalizer
from softattn.normalizers.domains import EPS, Domain


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


def _softplus_power(s, stats, *, power, eps):
  n = jnp.maximum(stats.n, 1.0)
  return jax.nn.softplus(jnp.log(n) * s) ** power


_LSSA_DOC = r"""(Gao & Spratling 2025, arXiv 2501.13428).

    ``g = softplus(log(n) s)^power``, ``w = g / sum g`` over the ``n``
    unmasked keys. Softmax is read as a positive map followed by
    l1-normalisation; LSSA keeps the l1-normalisation, swaps ``exp`` for
    softplus and multiplies the scores by ``log n`` (the length-dependent
    factor the paper derives from entropy invariance). LSSAR adds the
    re-weighting stage that sharpens the distribution: raising the weights
    to ``power > 1`` and re-normalising, which equals ``g^power / sum
    g^power``, so it still streams in one pass.

    *Inferred*: the paper's text was not available when this was written;
    the ``log n`` factor with no further constant and the re-weighting as a
    plain power are our reading of its abstract and summaries. Both are
    parameters here: check them against the paper's equations before
    relying on exact reproduction.
"""

lssa = Normalizer(
    name="lssa", mode="ratio", needs="count",
    defaults=dict(power=1.0, eps=0.0), transform=_softplus_power,
    eps_param="eps",
    domains=dict(power=Domain(lo=0.0, lo_open=True, hi=16.0), eps=EPS),
    formula="`g/Σg`, g = softplus(log n·s)^p, p = 1 (*inferred* form)",
    source="Gao & Spratling 2025, arXiv 2501.13428",
    doc="Length-scaled softplus attention, LSSA " + _LSSA_DOC + r"""
    ``power`` defaults to 1 (plain LSSA); ``softplus > 0``, so no eps is
    needed (default 0).
    """)

lssar = Normalizer(
    name="lssar", mode="ratio", needs="count",
    defaults=dict(power=REQUIRED, eps=0.0), transform=_softplus_power,
    eps_param="eps",
    domains=dict(power=Domain(lo=1.0, hi=16.0,
                              note="the re-weighting sharpens"), eps=EPS),
    formula="`g/Σg`, g = softplus(log n·s)^p, p > 1 given (*inferred* form)",
    source="Gao & Spratling 2025, arXiv 2501.13428",
    doc="LSSA with re-weighting, LSSAR " + _LSSA_DOC + r"""
    ``power`` has no default: the paper's value was not confirmed, so a spec
    must give it, e.g. ``"lssar(power=3)"``.
    """)
