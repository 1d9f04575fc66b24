"""Softmax and its re-scaled relatives: NormSoftmax and variants, LogitNorm,
scalable softmax, softpick, attention sinks (softmax + 1, learnable sink) and
Cog attention's signed softmax."""

import jax.numpy as jnp

from softattn.normalizers.core import REQUIRED, Learnable, Normalizer
from softattn.normalizers.domains import EPS, POSITIVE, REAL, Domain


def _std(stats, eps):
  return jnp.sqrt(stats.var + eps)


softmax = Normalizer(
    name="softmax", mode="exp", needs="none", defaults={},
    transform=lambda s, stats: s,
    formula="`exp(s)/Σexp(s)`", source="Vaswani et al. 2017",
    doc=r"""Softmax: ``w_i = exp(s_i) / sum_j exp(s_j)`` over unmasked keys.

    The baseline (Vaswani et al. 2017). Computed stably by subtracting the row
    max (a running max when attention streams key blocks).
    """)


def _nsm(s, stats, *, gamma, tau, eps):
  return (s - stats.mean) / (tau * jnp.minimum(_std(stats, eps), gamma))


normsoftmax = Normalizer(
    name="normsoftmax", mode="exp", needs="moments",
    defaults=dict(gamma=jnp.inf, tau=1.0, eps=1e-6), transform=_nsm,
    domains=dict(gamma=POSITIVE, tau=POSITIVE, eps=EPS), default_scale=1.0,
    formula="`softmax((s-μ)/(τ·min(σ, γ)))`, σ = sqrt(var + eps)",
    source="Jiang et al. 2023",
    doc=r"""NormSoftmax (Jiang et al. 2023, eq. 4 and 29).

    ``w = softmax((s - mean(s)) / (tau * min(std(s), gamma)))``

    Mean and std run over the unmasked keys of each row. Softmax with a
    per-row temperature: translation invariant, and for ``std < gamma`` also
    invariant to ``s -> k s`` (Lemma 2); the input gradient has mean 0 (Lemma 1).

    Args (besides ``scores``, ``mask``):
      gamma: clipping of the std; the paper uses ``sqrt(d)`` or ``inf``. Write
        ``"normsoftmax(gamma=sqrt_d)"`` to have attention resolve ``sqrt(d)``.
      tau: temperature (eq. 29), default 1.
      eps: *inferred* (the paper states none): ``std = sqrt(var + eps)`` with the
        biased variance, so constant rows (e.g. the first causal row) stay finite.

    In attention the paper feeds the raw ``q.k`` (no ``1/sqrt(d)``), so this
    normalizer's ``default_scale`` is 1; pass ``scale=`` to override.
    """)


def _nsm_learnable(s, stats, *, w, eps):
  # softmax is translation invariant, so centring changes nothing but range.
  return w * (s - stats.mean) / _std(stats, eps)


normsoftmax_learnable = Normalizer(
    name="normsoftmax_learnable", mode="exp", needs="moments",
    defaults=dict(w=REQUIRED, eps=1e-6), transform=_nsm_learnable,
    domains=dict(w=REAL, eps=EPS), default_scale=1.0,
    # Init 1 makes it start as NormSoftmax(gamma=inf).
    learnable=dict(w=Learnable("scalar", 1.0)),
    formula="`softmax(w·s/σ)` (f1), `w` learnable",
    source="Jiang et al. 2023 Tab. 1",
    doc=r"""NormSoftmax variant f1 (Jiang et al. 2023, Table 1).

    ``w_i = softmax(w * s / std(s))`` with a learnable scalar ``w`` (pass it as
    ``w=``; ``softattn.nn.MultiHeadAttention`` owns it as a parameter). The row
    mean is subtracted first, which softmax ignores but keeps exp in range.
    ``eps`` as in ``normsoftmax``.
    """)


def _nsm_inverse(s, stats, *, gamma, eps):
  return (s - stats.mean) / jnp.maximum(_std(stats, eps), gamma)


normsoftmax_inverse = Normalizer(
    name="normsoftmax_inverse", mode="exp", needs="moments",
    defaults=dict(gamma=1.0, eps=1e-6), transform=_nsm_inverse,
    domains=dict(gamma=POSITIVE, eps=EPS), default_scale=1.0,
    formula="`softmax(s/max(σ, γ))` (f2)", source="Jiang et al. 2023 Tab. 1",
    doc=r"""NormSoftmax variant f2, inverse clipping (Jiang et al. 2023, Table 1).

    ``w = softmax(s / max(std(s), gamma))``. Table 1 used ``gamma = sqrt(d)``
    (write ``gamma=sqrt_d``); the default 1.0 is *inferred* for direct calls.
    """)


def _logitnorm(s, stats, *, tau, eps):
  norm = jnp.sqrt(stats.n * (stats.var + stats.mean * stats.mean))
  if tau is None:  # the paper's best temperature, tau = n^-1/2
    tau = 1.0 / jnp.sqrt(jnp.maximum(stats.n, 1.0))
  return s / (tau * norm + eps)


logitnorm = Normalizer(
    name="logitnorm", mode="exp", needs="moments",
    defaults=dict(tau=None, eps=1e-6), transform=_logitnorm,
    domains=dict(tau=Domain(lo=0.0, lo_open=True, allow_none=True), eps=EPS),
    default_scale=1.0,
    formula="`softmax(s/(τ‖s‖₂))`, τ = n^-1/2 by default",
    source="Wei et al. 2022",
    doc=r"""LogitNorm (Wei et al. 2022; as compared in Jiang et al. 2023 eq. 8).

    ``w = softmax(s / (tau * ||s||_2))``, no mean shift (so not translation
    invariant). ``tau=None`` uses ``n^-1/2``, the value Jiang et al. found best;
    with it LogitNorm equals NormSoftmax(gamma=inf) up to the mean shift (eq. 9).
    ``eps`` guards the all-zero row.
    """)


def _ssmax(s, stats, *, s_scale):
  return s_scale * jnp.log(jnp.maximum(stats.n, 1.0)) * s


ssmax = Normalizer(
    name="ssmax", mode="exp", needs="count",
    defaults=dict(s_scale=REQUIRED), transform=_ssmax,
    domains=dict(s_scale=REAL),
    # Init 0.43 is *inferred*: the value the paper reports fitted scales
    # settle near (override with MultiHeadAttention's learnable_init).
    learnable=dict(s_scale=Learnable("per_head", 0.43)),
    formula="`softmax(s_scale·log n·s)`, `s_scale` learnable",
    source="Nakanishi 2025",
    doc=r"""Scalable softmax (Nakanishi 2025, arXiv 2501.19399).

    ``w = softmax(s_scale * log(n) * s)``: the temperature grows with the number
    of keys so attention does not flatten at long context. ``s_scale`` is a
    learnable scalar per head (``MultiHeadAttention`` owns it).
    """)


softpick = Normalizer(
    name="softpick", mode="softpick", needs="none", defaults=dict(eps=1e-6),
    domains=dict(eps=EPS),
    transform=lambda s, stats, eps: s, eps_param="eps", is_distribution=False,
    formula="`relu(eˢ-1)/(Σ|eˢ-1| + eps)`", source="Zuhri et al. 2025",
    doc=r"""Softpick (Zuhri et al. 2025, arXiv 2504.20966).

    ``w_i = relu(exp(s_i) - 1) / (sum_j |exp(s_j) - 1| + eps)``. Rows can sum
    to less than 1 (no attention sink is forced). Computed with both terms
    multiplied by ``exp(-m)``, ``m = max(row max, 0)``, so nothing overflows.
    """)


# -- attention sinks and signed softmax ---------------------------------------
softmax_1 = Normalizer(
    name="softmax_1", mode="exp_sink", needs="none", defaults={},
    transform=lambda s, stats: s, is_distribution=False,
    formula="`exp(s)/(1+Σexp(s))`: a zero logit in the denominator",
    source="Miller 2023 (blog)",
    doc=r"""Softmax plus one (Miller 2023, "Attention is off by one").

    ``w_i = exp(s_i) / (1 + sum_j exp(s_j))``: softmax with an extra zero
    logit in the denominator only, so a head can attend to nothing (rows sum
    to less than 1). It is ``softmax_sink`` with ``sink = 0``: mode
    ``exp_sink`` (``softattn.modes``) with the sink fixed at 0. The source is
    a blog post, not a paper (no equation number).
    """)


softmax_sink = Normalizer(
    name="softmax_sink", mode="exp_sink", needs="none",
    defaults=dict(sink=REQUIRED), domains=dict(sink=REAL),
    transform=lambda s, stats, sink: s, eps_param="sink",
    is_distribution=False,
    learnable=dict(sink=Learnable("per_head", 0.0)),
    formula="`exp(s)/(exp(sink)+Σexp(s))`, `sink` learnable per head",
    source="gpt-oss (OpenAI 2025)",
    doc=r"""Softmax with a learnable sink logit (gpt-oss, OpenAI 2025).

    ``w_i = exp(s_i) / (exp(sink) + sum_j exp(s_j))``: the sink joins the
    denominator only; it has no value, so the weights sum to
    ``1 - sigmoid(sink - logsumexp(s))`` < 1. gpt-oss learns one sink logit
    per head (splash attention calls them ``sinks``); ``MultiHeadAttention``
    owns it as ``norm_sink`` ``[H, 1, 1]``, init 0 (*inferred*: gpt-oss ships
    trained values, not an init), where it starts as ``softmax_1``. Also in
    Xiao et al. 2023 (arXiv 2309.17453) as a learnable "sink token".

    Mode ``exp_sink``: keys stream as softmax's running max and sum, the sink
    term ``exp(sink - m)`` joins at the end. The fused kernels take the sink
    as a number or as an array (learnable): its gradient is ``-sum_i p0_i
    (dO_i . O_i)`` with the sink's weight ``p0_i = exp(sink - L_i)``, read
    from the forward's saved log-normaliser ``L`` (``modes.Mode.scalar_grad``).
    """)


cog = Normalizer(
    name="cog", mode="signed_exp", needs="none", defaults={},
    transform=lambda s, stats: s, is_distribution=False,
    formula="`sign(s)·exp(|s|)/Σexp(|s|)` (negative weights)",
    source="Lv et al. 2024, arXiv 2411.07176",
    doc=r"""Cog attention, the signed exp (Lv et al. 2024, arXiv 2411.07176).

    ``w_i = sign(s_i) exp(|s_i|) / sum_j exp(|s_j|)``: softmax of ``|s|`` with
    the sign of each score put back, so weights can be negative (``sum |w| =
    1``). Form confirmed in the authors' code (trestad/CogAttn:
    ``sign(p) * softmax(|p|)`` with ``p = q.k / sqrt(d)``). The paper keeps
    softmax in the first and last layers for stability; choose per layer.
    Mode ``signed_exp``: streamed with a running max of ``|s|``.
    """)
