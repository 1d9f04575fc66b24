"""Normalizers that need no normalisation sum: ``w = phi(s, row stats)``.

ReLU/n, scaled, sigmoid, NAP, ConSmax, Mega's Laplace function and polynomial
attention.

They need no running max when streamed, and the ones linear in ``s``
(``scaled``, ``relu_seqlen(act='identity')``) have an O(n d^2) path.
"""

import math

import jax
import jax.numpy as jnp

from softattn.normalizers.core import REQUIRED, Learnable, Normalizer
from softattn.normalizers.domains import EPS, POSITIVE, REAL, Domain

ACTIVATIONS = {
    "relu": jax.nn.relu,
    "relu2": lambda x: jnp.square(jax.nn.relu(x)),
    "gelu": lambda x: jax.nn.gelu(x, approximate=True),  # tanh form
    "gelu_exact": lambda x: jax.nn.gelu(x, approximate=False),  # erf form
    "softplus": jax.nn.softplus,
    "identity": lambda x: x,
    "relu6": jax.nn.relu6,
    "sigmoid": jax.nn.sigmoid,
}


def _activation(act):
  try:
    return ACTIVATIONS[act]
  except (KeyError, TypeError):
    raise ValueError(
        f"relu_seqlen: unknown act={act!r}; valid: "
        f"{', '.join(ACTIVATIONS)}.") from None


def _safe_n(stats):
  return jnp.maximum(stats.n, 1.0)


def _relu_seqlen(s, stats, *, alpha, act):
  return _safe_n(stats) ** (-alpha) * _activation(act)(s)


relu_seqlen = Normalizer(
    name="relu_seqlen", mode="pointwise", needs="count",
    defaults=dict(alpha=1.0, act="relu"), transform=_relu_seqlen,
    domains=dict(alpha=Domain(lo=0.0, hi=1.0, note="the paper's range"),
                 act=Domain(choices=tuple(ACTIVATIONS))),
    linear_coef=lambda n, *, alpha, act: n ** (-alpha),
    linear_if=lambda *, alpha, act: act == "identity",
    is_distribution=False,
    formula="`n^-α h(s)`, h ∈ " + ", ".join(ACTIVATIONS),
    source="Wortsman et al. 2023",
    doc=r"""ReLU attention family (Wortsman et al. 2023).

    ``w = n^(-alpha) * h(s)`` with ``n`` the number of unmasked keys and ``h`` in
    ``relu, relu2 (= relu^2), gelu, gelu_exact, softplus, identity, relu6,
    sigmoid``; ``alpha`` in ``[0, 1]`` as in the paper's sweep. The headline is
    ``relu / n`` (``alpha=1``). Not a distribution.

    ``act='gelu'`` is the tanh approximation
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``, as ``jax.nn.gelu``'s
    default and so flax's and big_vision's MLPs; ``act='gelu_exact'`` is
    ``x Phi(x)`` with the Gaussian CDF (erf). They differ by at most ~1e-3. With
    ``act='identity'`` it is linear in the scores, so attention can compute it
    as ``Q (K^T V)`` in O(n d^2). qk-LayerNorm and the gated unit live in
    ``softattn.nn.MultiHeadAttention``.
    """)


scaled = Normalizer(
    name="scaled", mode="pointwise", needs="count", defaults={},
    transform=lambda s, stats: s / jnp.sqrt(_safe_n(stats)),
    linear_coef=lambda n: n ** -0.5, is_distribution=False,
    formula="`s/sqrt(n)`", source="Cho et al. 2022",
    doc=r"""Scaled dot product without softmax (Cho et al. 2022, eq. 3).

    ``w = s / sqrt(n)``; with ``s = q.k / sqrt(d)`` the output is
    ``Q (K^T V) / sqrt(n d)``, which attention computes right-to-left in
    O(n d^2) (``implementation='linear'``).
    """)


def _sigmoid(s, stats, *, bias):
  if bias is None:
    bias = -jnp.log(_safe_n(stats))
  return jax.nn.sigmoid(s + bias)


sigmoid = Normalizer(
    name="sigmoid", mode="pointwise", needs="count", defaults=dict(bias=None),
    domains=dict(bias=Domain(lo_open=True, hi_open=True, allow_none=True)),
    transform=_sigmoid, is_distribution=False,
    formula="`sigmoid(s - log n)`", source="Ramapuram et al. 2024",
    doc=r"""Sigmoid attention (Ramapuram et al. 2024, arXiv 2409.04431).

    ``w = sigmoid(s + b)`` with ``b = -log(n)`` by default (``bias=None``), the
    paper's choice that keeps early-training weights near ``1/n``.
    """)


def _nap(s, stats, *, g, b, eps):
  return (s - stats.mean) / jnp.sqrt(stats.var + eps) * g + b


nap = Normalizer(
    name="nap", mode="pointwise", needs="moments",
    defaults=dict(g=1.0, b=0.0, eps=1e-6), transform=_nap,
    domains=dict(g=REAL, b=REAL, eps=EPS),
    # Per-head gain and bias, init at the defaults; learned unless the spec
    # string fixes them, e.g. "nap(g=1.0, b=0.0)".
    learnable=dict(g=Learnable("per_head", 1.0), b=Learnable("per_head", 0.0)),
    is_distribution=False,
    formula="`(s-μ)/σ·g + b`", source="Richter & Wattenhofer 2020",
    doc=r"""Normalized attention pooling (Richter & Wattenhofer 2020).

    ``w = (s - mean(s)) / std(s) * g + b`` over unmasked keys, with a gain
    ``g`` and bias ``b`` that the paper learns per head (pass them, or let
    ``MultiHeadAttention`` own them). ``eps`` inside the std as in NormSoftmax.
    """)


def _consmax(s, stats, *, beta, denom, max_exponent):
  return jnp.exp(jnp.minimum(s - beta, max_exponent)) / denom


consmax = Normalizer(
    name="consmax", mode="pointwise", needs="none",
    defaults=dict(beta=REQUIRED, denom=REQUIRED, max_exponent=80.0),
    transform=_consmax,
    domains=dict(beta=REAL, denom=POSITIVE,
                 max_exponent=Domain(lo=0.0, lo_open=True,
                                     note="a guard against exp overflow")),
    is_distribution=False,
    learnable=dict(beta=Learnable("per_head", 2.5),
                   denom=Learnable("per_head", 100.0)),
    formula="`exp(s-β)/γ` (`beta`, `denom` = γ learnable per head)",
    source="Liu et al. 2024, arXiv 2402.10930",
    doc=r"""ConSmax (Liu et al. 2024, arXiv 2402.10930).

    ``w = exp(s - beta) / gamma`` with learnable ``beta`` (the paper's stand-in
    for the row max) and ``gamma`` (for the row sum), written ``denom`` here
    (``gamma`` is NormSoftmax's clip). No max or sum reduction, so it streams
    like any pointwise normalizer; at inference the two merge into one
    constant ``exp(-beta) / gamma``. ``MultiHeadAttention`` learns both per
    head, init ``beta = 2.5``, ``denom = 100`` (*inferred*: the defaults of
    the authors' nanoGPT fork, not stated in the paper).

    ``max_exponent`` is *inferred*, not in the paper: the exponent is capped
    at it (default 80, below float32's overflow at ~88.7) so a large score
    gives a large finite weight instead of Inf; pass ``inf`` to disable.
    """)


@jax.custom_jvp
def _half_one_plus_erf(z):
  """``0.5 (1 + erf(z))``, differentiated with a plain ``exp(-z^2)``.

  Why not jax's own derivative: from jax 0.12, erf's JVP calls
  ``exp(..., accuracy=HIGHEST)``, which Mosaic TPU refuses to lower ("Not
  implemented: accuracy"), so the fused Pallas backward would not compile.
  """
  return 0.5 * (1.0 + jax.lax.erf(z))


@_half_one_plus_erf.defjvp
def _half_one_plus_erf_jvp(primals, tangents):
  (z,), (dz,) = primals, tangents
  return _half_one_plus_erf(z), jnp.exp(-z * z) * (1.0 / math.sqrt(math.pi)) * dz


def _laplace(s, stats, *, mu, sigma, alpha):
  x = _safe_n(stats) ** (-alpha) * s
  return _half_one_plus_erf((x - mu) / (sigma * math.sqrt(2.0)))


laplace = Normalizer(
    name="laplace", mode="pointwise", needs="count",
    defaults=dict(mu=math.sqrt(0.5), sigma=math.sqrt(0.25 / math.pi),
                  alpha=1.0),
    transform=_laplace,
    domains=dict(mu=REAL, sigma=POSITIVE,
                 alpha=Domain(lo=0.0, hi=1.0, note="n^-alpha scales s")),
    default_scale=1.0, is_distribution=False,
    formula="`0.5(1+erf((s/n-μ)/(σ√2)))`, μ = √½, σ = √(1/4π), scale 1",
    source="Mega, Ma et al. 2022, arXiv 2209.10655",
    doc=r"""Mega's Laplace attention function (Ma et al. 2022, arXiv 2209.10655).

    ``w = 0.5 (1 + erf((x - mu) / (sigma sqrt 2)))`` with ``x = s / n^alpha``,
    ``mu = sqrt(1/2)``, ``sigma = sqrt(1/(4 pi))``: a Gaussian CDF chosen to
    approximate ``relu(x)^2`` near 0 while staying bounded in [0, 1]. Mega
    divides ``q.k`` by the number of (unmasked) keys and does *not* scale by
    ``1/sqrt(d)``; confirmed in the authors' code (facebookresearch/mega,
    ``element_attention``: ``laplace(q k^T / lengths + bias)``), hence
    ``alpha = 1`` and ``default_scale = 1``. Not a distribution.
    """)


def _polynomial(s, stats, *, p):
  # p is a whole number (its domain): an integer power is real for s < 0.
  return jax.lax.integer_pow(s, int(p)) / jnp.sqrt(_safe_n(stats))


polynomial = Normalizer(
    name="polynomial", mode="pointwise", needs="count", defaults=dict(p=3),
    transform=_polynomial,
    domains=dict(p=Domain(lo=1.0, hi=9.0, integer=True,
                        note="x^p must be real for x < 0")),
    is_distribution=False,
    formula="`s^p/√n`, p = 3 by default",
    source="Saratchandran et al. 2024, arXiv 2410.18613",
    doc=r"""Polynomial attention (Saratchandran et al. 2024, arXiv 2410.18613).

    ``w = s^p / sqrt(n)``: the paper's ``phi(x) = x^p / sqrt(N)``, chosen so
    the attention matrix's Frobenius norm grows like softmax's
    (``O(sqrt(N))``), with no positivity, normalisation or sparsity. ``p`` is
    a whole number; the default 3 (cubic) is *inferred* as the paper's main
    choice (its exact equation number was not checked against the text).
    Scores keep the usual ``1/sqrt(d)`` (*inferred*).
    """)
