"""The accumulation modes: how transformed scores ``t`` become weights and
outputs, written once for every attention path.

A normalizer's declaration (``softattn.normalizers.core.Normalizer``) names a
``mode``; this table says what the mode computes on one block of keys. Every
path runs the same functions:

* **dense** is the single-block case: ``weights(mode, t, valid, eps)`` runs
  one ``block`` over the whole row and divides by ``finish``'s denominator;
* **chunked** (``softattn.chunked``) scans key blocks with ``init``,
  ``update`` and ``output`` under ``lax.scan`` (autodiff gives the backward);
* **pallas** (``softattn.pallas``) tiles them on ``[bq, bk]`` tiles in VMEM
  and uses ``grad`` as its backward rule.

A mode is data, ``Mode(m0, block, finish, grad, split_pv, streams,
scalar_grad, how)`` (``streams``, ``how``: its words in the README's and
docs/kernels.md's tables, which ``python -m softattn.normalizers`` renders);
the per-row state is ``(m, l, acc)``: a reference point ``m`` (the running
max of ``exp``/``softpick``, unused otherwise), a row sum ``l`` and the
output accumulator ``acc`` (``[..., 1]``, ``[..., 1]``, ``[..., dv]``):

* ``block(m, t, valid, fixed)`` -> ``(m_new, corr, e, l_add)``: one key
  block's unnormalised weights ``e``, the factor ``corr`` that moves what
  was accumulated before to the new reference point (None: 1), and the
  block's share of ``l`` (None: nothing). ``fixed``: ``m`` is a known bound
  (``Normalizer.exp_upper``), not a running max. ``m=None``: the whole row
  is this block (the dense case), nothing came before.
* ``finish(m, l, eps)`` -> ``(den, res_a, res_b)``: the output is
  ``acc / den`` (None: ``acc``); ``res_a``/``res_b`` are the two per-row
  residuals the fused backward reads back.
* ``grad(t, valid, dp, res_a, res_b, di)`` -> ``(w, dt)``: the weights (for
  ``dV = W^T dO``) and the cotangent of ``t``, given ``dp = dO V^T`` and
  ``di = rowsum(dO * O)`` (the fused backward; the other paths use autodiff).
* ``scalar_grad(scalar, res_a, res_b, di)`` -> the cotangent of the mode's
  scalar (``Normalizer.eps_param``) per row, from the residuals alone, or
  None where the fused path takes the scalar as a number only. ``exp_sink``
  has one: a learnable sink's gradient needs no extra kernel pass.

============  ========================================  =======================
mode          forward                                    ``dt``
============  ========================================  =======================
pointwise     ``o = sum t v``                            ``dp``
ratio         ``o = sum g v / Z``, ``Z = sum g + eps``   ``(dp - di) / Z``
exp           online softmax, ``L = m + log l``          ``w (dp - di)``
softpick      ``e = e^(t-m) - e^-m``, ``o = sum relu(e)  ``(1[e>0] dp - sign(e)
              v / D``, ``D = sum |e| + eps e^-m``         di) e^(t-m) / D``
exp_sink      as exp, ``l + e^(sink - m)`` at the end     ``w (dp - di)``
signed_exp    ``p = e^(|t|-m)``, ``o = sum sign(t) p v``  ``p (dp - sign(t) di)``
              ``/ sum p``
============  ========================================  =======================

``di = do . o = sum_j w_ij dp_ij`` is the row term every normalised mode needs
(for ratio it is ``sum g dp / Z``, for softpick ``sum relu(e) dp / D``). The
reference point ``m`` of ``exp``/``softpick`` is a constant of the math (the
weights do not depend on it), so it has no cotangent (``stop_gradient``).
Shapes are generic: ``t`` is ``[..., keys]`` (a dense row, a chunked
``[B, H, cq, ck]`` block or a ``[bq, bk]`` tile), ``valid`` broadcasts to it
or is None (every key valid: the selects are skipped, the hot path of models
without padding).

A new mode is one ``Mode`` entry here; the paths need no edit.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

NEG = -1e30  # finite "minus infinity": exp(NEG - m) is 0, NEG - NEG is not NaN


class Mode(NamedTuple):
  m0: float
  block: Callable
  finish: Callable
  grad: Callable
  split_pv: bool = False
  streams: str = ""   # how the path streams it, in words (README's table)
  scalar_grad: Callable | None = None
  how: str = ""       # what the chunked and fused paths carry, in words
                      # (docs/kernels.md's table of modes)


def masked(valid, x, fill):
  """``where(valid, x, fill)``; ``valid=None`` means every key is valid.

  The unmasked case skips the selects entirely rather than relying on XLA to
  fold an all-true mask: it is the hot path of every model without padding.
  """
  return x if valid is None else jnp.where(valid, x, fill)


def safe_denominator(den: jax.Array, eps: float) -> jax.Array:
  """``den + eps`` pushed away from 0 on its own side, so ``|result| >= eps``.

  Equal to the spec's ``sum g + eps`` whenever ``sum g >= 0``; for normalizers
  whose ``g`` can be negative (``sin_max``) it guards the division instead of
  producing Inf.
  """
  out = jnp.where(den >= 0, den + eps, den - eps)
  return jnp.where(out == 0, 1.0, out)  # eps=0 and an empty row: 0/1, not 0/0


def _nonzero(x):
  return jnp.where(x != 0, x, 1.0)


def _narrower(a, b) -> bool:
  return jnp.finfo(a).bits < jnp.finfo(b).bits


def pv(w, v, acc_dtype, split=False):
  """``w @ v`` over the last two axes (leading axes batch), ``w`` cast to
  ``v``'s dtype (bf16 MXU for bf16 inputs), accumulated in ``acc_dtype``.

  ``split``: when ``v`` is narrower than ``acc_dtype``, ``w`` goes in as a
  pair ``hi + lo`` of ``v``'s dtype (two passes, ~16 bits of ``w``). Why the
  ``ratio`` mode asks for it: with sign-changing ``g`` (sin_max, siren_max,
  sin2_max_shifted's causal rows) ``sum|g| / Z`` reaches 1e3. Rounding ``g``
  for ``g @ v`` but not in ``Z`` makes ``o`` inconsistent with the weights
  ``g / Z``, and the fused backward's ``di = do . o`` amplifies that: bf16
  dQ/dK were ~10x less accurate than the dense path. Rounding ``g`` in ``Z``
  too keeps them consistent but moves ``Z`` itself when it is a small
  difference of large terms (sin_max: 50x worse ``o``).
  """
  n = w.ndim
  batch = tuple(range(n - 2))
  dims = (((n - 1,), (n - 2,)), (batch, batch))
  dot = lambda x: jax.lax.dot_general(  # noqa: E731
      x.astype(v.dtype), v, dims, preferred_element_type=acc_dtype)
  if not (split and _narrower(v.dtype, acc_dtype)):
    return dot(w)
  hi = w.astype(v.dtype).astype(w.dtype)
  return dot(hi) + dot(w - hi)


def pv_passes(mode: str, dtype) -> int:
  """Passes of the forward's ``w @ v`` over ``v`` of ``dtype`` (cost model)."""
  return 2 if MODES[mode].split_pv and _narrower(dtype, jnp.float32) else 1


# -- the generic drivers ----------------------------------------------------------
def init(mode: str, rows: tuple[int, ...], dv: int, dtype, m0=None):
  """The state ``(m, l, acc)`` of ``rows`` query rows before any key block;
  ``m0`` overrides the mode's starting reference (a known bound)."""
  m0 = MODES[mode].m0 if m0 is None else m0
  return (jnp.full(rows + (1,), m0, dtype), jnp.zeros(rows + (1,), dtype),
          jnp.zeros(rows + (dv,), dtype))


def update(mode: str, carry, t, valid, v, fixed=False):
  """The state after one key block of transformed scores ``t`` and values
  ``v``."""
  spec = MODES[mode]
  m, l, acc = carry
  m_new, corr, e, l_add = spec.block(m, t, valid, fixed)
  if corr is not None:
    l, acc = l * corr, acc * corr
  if l_add is not None:
    l = l + l_add
  return m_new, l, acc + pv(e, v, acc.dtype, spec.split_pv)


def output(mode: str, carry, eps):
  """``(out, res_a, res_b)`` from the final state."""
  m, l, acc = carry
  den, res_a, res_b = MODES[mode].finish(m, l, eps)
  return (acc if den is None else acc / den), res_a, res_b


def weights(mode: str, t, valid, eps, upper=None):
  """The weights of whole rows ``t`` (the dense path): one block from the
  initial state; ``upper``: a known bound on ``t`` replacing the max."""
  spec = MODES[mode]
  m = None if upper is None else jnp.full(t.shape[:-1] + (1,), upper, t.dtype)
  m_new, _, e, l = spec.block(m, t, valid, upper is not None)
  if l is None:
    l = jnp.zeros(t.shape[:-1] + (1,), t.dtype)
  den, _, _ = spec.finish(m_new, l, eps)
  return e if den is None else e / den


def _cpu_row(row):
  # The same values (only -inf can fail the test, and exp(-inf - nan) is
  # nan, as exp(-inf - -inf)), but as a select: XLA:CPU then keeps the score
  # matmul apart from the exp instead of fusing and recomputing it (13 %
  # faster softmax fwd+bwd at L=1024 than with the bare max).
  return jnp.where(row > -jnp.inf, row, jnp.nan)


def _running_max(m, t, valid, floor=None):
  """``max(m, row max of valid t)``; ``m=None`` (a whole row, the dense
  case): the row max itself (the lowest finite number for an empty row), or
  at least ``floor``."""
  if m is None:
    # No select on the row max: on TPU one (e.g. on isfinite(row)) became a
    # fusion of its own between the score matmul's max and the exp, and XLA
    # then summed exp(t - row) in a second pass over the scores (29 MB per
    # ViT-B/16 layer at 16 images per chip). A masked entry is the lowest
    # finite number instead, so a fully masked row's max is finite and its
    # weights are 0. With no mask, a row whose every score is -inf (a -inf
    # bias) has no finite max: its weights are NaN, as jax.nn.softmax's;
    # mask such keys with ``mask``.
    lowest = jnp.finfo(t.dtype).min
    row = jnp.max(masked(valid, t, lowest), axis=-1, keepdims=True)
    row = jax.lax.platform_dependent(row, cpu=_cpu_row, default=lambda r: r)
    if floor is not None:
      row = jnp.maximum(row, floor)
    return jax.lax.stop_gradient(row)
  m_new = jnp.maximum(m, jnp.max(masked(valid, t, NEG), axis=-1,
                                 keepdims=True))
  return jax.lax.stop_gradient(m_new)


# -- pointwise: w = t ---------------------------------------------------------
def _pointwise_block(m, t, valid, fixed):
  return m, None, masked(valid, t, 0.0), None


def _pointwise_finish(m, l, eps):
  return None, l, l


def _pointwise_grad(t, valid, dp, res_a, res_b, di):
  return masked(valid, t, 0.0), masked(valid, dp, 0.0)


# -- ratio: w = g / (sum g + eps) ---------------------------------------------
def _ratio_block(m, t, valid, fixed):
  g = masked(valid, t, 0.0)
  return m, None, g, jnp.sum(g, axis=-1, keepdims=True)


def _ratio_finish(m, l, eps):
  z = safe_denominator(l, eps)
  return z, z, z


def _ratio_grad(t, valid, dp, z, _, di):
  w = masked(valid, t, 0.0) / z
  return w, masked(valid, (dp - di) / z, 0.0)


# -- exp: online softmax --------------------------------------------------------
def _exp_block(m, t, valid, fixed):
  if fixed:
    m_new, corr = m, None
  else:
    m_new = _running_max(m, t, valid)
    corr = None if m is None else jnp.exp(m - m_new)
  # Masked entries replaced before exp: no Inf/NaN there, in the value or
  # its gradient (the "double where" pattern). By the lowest finite number,
  # not by the row max: a select that reads the max made XLA:TPU sum the
  # exps in a second pass over the scores (tests/test_dense_tpu_traffic.py).
  e = masked(valid, jnp.exp(masked(valid, t, jnp.finfo(t.dtype).min) - m_new),
             0.0)
  return m_new, corr, e, jnp.sum(e, axis=-1, keepdims=True)


def _exp_finish(m, l, eps):
  den = _nonzero(l)
  lse = jnp.where(l > 0, m + jnp.log(den), 0.0)
  return den, lse, lse


def _exp_grad(t, valid, dp, lse, _, di):
  w = masked(valid, jnp.exp(masked(valid, t, lse) - lse), 0.0)
  return w, w * (dp - di)


# -- softpick: relu(e^t - 1) / (sum |e^t - 1| + eps), scaled by e^-m ---------
def _softpick_block(m, t, valid, fixed):
  # e(m) = exp(t - m) - exp(-m) = exp(-m) (e^t - 1): rescaling by
  # exp(m_old - m_new) moves both sums to the new reference point, and
  # m = max(row max, 0) keeps every term <= 1.
  m_new = _running_max(m, t, valid, floor=0.0)
  corr = None if m is None else jnp.exp(m - m_new)
  e = jnp.exp(masked(valid, t, 0.0) - m_new) - jnp.exp(-m_new)
  # jax.nn.relu, not jnp.maximum: its derivative at 0 is 0, where
  # maximum's splits the tie (more work in the backward).
  num = masked(valid, jax.nn.relu(e), 0.0)
  den = jnp.sum(masked(valid, jnp.abs(e), 0.0), axis=-1, keepdims=True)
  return m_new, corr, num, den


def _softpick_finish(m, l, eps):
  den = _nonzero(l + eps * jnp.exp(-m))
  return den, m, den


def _softpick_grad(t, valid, dp, m, den, di):
  t = masked(valid, t, 0.0)
  et = jnp.exp(t - m)
  e = et - jnp.exp(-m)
  w = masked(valid, jnp.maximum(e, 0.0), 0.0) / den
  de = (jnp.where(e > 0, dp, 0.0) - jnp.sign(e) * di) / den
  return w, masked(valid, de * et, 0.0)


# -- exp_sink: softmax with a sink logit in the denominator only ---------------
# exp(t_i) / (exp(sink) + sum exp(t_j)). The keys stream exactly as ``exp``;
# the sink joins at ``finish`` (its scalar slot, ``Normalizer.eps``, holds the
# sink logit) as exp(sink - m) relative to the running max. The exponent is
# capped at _SINK_CAP: only rows the sink outweighs by more than e^80 are
# affected (their weights, all < 2e-35, are off by less than that), and a row
# with no valid key (m = NEG) keeps a finite denominator and gradient.
_SINK_CAP = 80.0


def _sink_finish(m, l, sink):
  den = l + jnp.exp(jnp.minimum(sink - m, _SINK_CAP))
  lse = m + jnp.log(den)
  return den, lse, lse


def _sink_grad(sink, lse, _, di):
  # o_i = sum_j e^{t_ij} v_j / Z_i with Z_i = e^sink + sum_j e^{t_ij}, so
  # do_i/dsink = -p0_i o_i, p0_i = e^sink / Z_i = exp(sink - L_i) (the sink's
  # weight; L includes the sink), and dL/dsink = -sum_i p0_i di_i. p0 <= 1:
  # the min keeps a row with no valid key (L = NEG + cap, o = 0, di = 0) at
  # p0 = 1, as the dense path has it, not at inf * 0.
  return -jnp.exp(jnp.minimum(sink - lse, 0.0)) * di


# -- signed_exp: sign(t) exp(|t|) / sum exp(|t|) (Cog attention) ---------------
def _signed_exp_block(m, t, valid, fixed):
  # exp's block on |t|, the sign put back on the numerator only.
  m_new, corr, p, l_add = _exp_block(m, jnp.abs(t), valid, fixed)
  return m_new, corr, jnp.sign(t) * p, l_add


def _signed_exp_grad(t, valid, dp, lse, _, di):
  # w_j = sign(t_j) p_j with p = softmax(|t|): dt_k = p_k (dp_k - sign(t_k) di)
  # (sign(t)^2 = 1 away from t = 0, where sign has no derivative).
  p = masked(valid, jnp.exp(masked(valid, jnp.abs(t), lse) - lse), 0.0)
  sign = jnp.sign(t)
  return sign * p, masked(valid, p * (dp - sign * di), 0.0)


MODES = {
    "pointwise": Mode(NEG, _pointwise_block, _pointwise_finish,
                      _pointwise_grad, streams="plain sums",
                      how="plain sum of `phi(s) v`, no normalisation"),
    "ratio": Mode(NEG, _ratio_block, _ratio_finish, _ratio_grad,
                  split_pv=True, streams="plain sums",
                  how="plain sums of `g v` and `g`, one division at the end"),
    "exp": Mode(NEG, _exp_block, _exp_finish, _exp_grad,
                streams="running max",
                how="online softmax (running max and sum); the backward reads "
                    "`L = m + log l`"),
    # The reference point starts at 0: softpick's is max(row max, 0).
    "softpick": Mode(0.0, _softpick_block, _softpick_finish, _softpick_grad,
                     streams="running max ≥ 0",
                     how="running max >= 0 rescales numerator and "
                         "`sum abs(e^t - 1)`"),
    "exp_sink": Mode(NEG, _exp_block, _sink_finish, _exp_grad,
                     streams="running max, sink added at the end",
                     scalar_grad=_sink_grad,
                     how="online softmax over the keys; `exp(sink - m)` joins "
                         "the denominator at the end, so `L` includes it and "
                         "the backward is `exp`'s; an array sink is a row "
                         "column read at the end, and its gradient "
                         "`-Σ_i exp(sink - L_i) (dO_i·O_i)` comes from the "
                         "saved `L` and `di` "
                         "(`Mode.scalar_grad`), with no extra kernel pass"),
    "signed_exp": Mode(NEG, _signed_exp_block, _exp_finish, _signed_exp_grad,
                       streams="running max of |s|",
                       how="online softmax of `abs(s)`, numerator `sign(s) p`; "
                           "`dt = p (dp - sign(s) di)`"),
}


# The logits soft-cap, applied to the scaled scores before any mode's
# accumulation, on every path that runs this table.
def check_soft_cap(cap) -> float | None:
  """``logits_soft_cap`` as a float (None stays None); anything but a
  positive finite number is a one-line ValueError."""
  if cap is None:
    return None
  if (isinstance(cap, bool) or not isinstance(cap, numbers.Real)
      or not 0.0 < float(cap) < math.inf):
    raise ValueError(f"logits_soft_cap={cap!r} is invalid; set it to a "
                     f"positive finite number (e.g. 50.0) or None for no cap")
  return float(cap)


def soft_cap(s, cap):
  """``cap * tanh(s / cap)``: the scores bounded to ``(-cap, cap)``, about
  ``s`` where ``|s| << cap``; ``cap=None``: ``s`` itself (the same array)."""
  if cap is None:
    return s
  return cap * jnp.tanh(s / cap)
