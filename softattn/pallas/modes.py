"""How each normalizer mode turns transformed scores ``t`` into the output,
forward and backward, on one ``[bq, bk]`` tile inside a kernel.

A mode is data: ``Mode(init, update, finish, grad)``.

* ``init(bq, dv)`` -> carry ``(m, l, acc)`` (``[bq, 1]``, ``[bq, 1]``,
  ``[bq, dv]``, f32); every mode uses the same three scratch buffers.
* ``update(carry, t, valid, v)`` -> carry after one key block.
* ``finish(carry, eps)`` -> ``(out, res_a, res_b)``: the output rows and two
  per-row residuals the backward pass reads back.
* ``grad(t, valid, dp, res_a, res_b, di)`` -> ``(w, dt)``: the weights
  (for ``dV = W^T dO``) and the cotangent of ``t``, given ``dp = dO V^T`` and
  ``di = rowsum(dO * O)``.

The weights per mode (``core.py`` and ``../shared/spec/normalizers.md``):

============  ========================================  =======================
mode          forward                                    ``dt``
============  ========================================  =======================
pointwise     ``o = sum t v``                            ``dp``
ratio         ``o = sum g v / Z``, ``Z = sum g + eps``   ``(dp - di) / Z``
exp           online softmax, ``L = m + log l``          ``w (dp - di)``
softpick      ``e = e^(t-m) - e^-m``, ``o = sum relu(e)  ``(1[e>0] dp - sign(e)
              v / D``, ``D = sum |e| + eps e^-m``         di) e^(t-m) / D``
============  ========================================  =======================

``di = do . o = sum_j w_ij dp_ij`` is the row term every normalised mode needs
(for ratio it is ``sum g dp / Z``, for softpick ``sum relu(e) dp / D``). The
running maximum ``m`` of ``exp``/``softpick`` is a constant of the math (the
weights do not depend on it), so it has no cotangent.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

NEG = -1e30  # finite "minus infinity": exp(NEG - m) is 0, NEG - NEG is not NaN


class Mode(NamedTuple):
  init: Callable
  update: Callable
  finish: Callable
  grad: Callable


def pv(w, v):
  """``w @ v`` with ``w`` cast to ``v``'s dtype (bf16 MXU for bf16 inputs),
  accumulated in f32."""
  return jax.lax.dot(w.astype(v.dtype), v, preferred_element_type=jnp.float32)


def _init(bq, dv, m0=NEG):
  return (jnp.full((bq, 1), m0, jnp.float32), jnp.zeros((bq, 1), jnp.float32),
          jnp.zeros((bq, dv), jnp.float32))


def _nonzero(x):
  return jnp.where(x != 0, x, 1.0)


# -- pointwise: w = t ---------------------------------------------------------
def _pointwise_update(carry, t, valid, v):
  m, l, acc = carry
  return m, l, acc + pv(jnp.where(valid, t, 0.0), v)


def _pointwise_finish(carry, eps):
  _, l, acc = carry
  return acc, l, l


def _pointwise_grad(t, valid, dp, res_a, res_b, di):
  return jnp.where(valid, t, 0.0), jnp.where(valid, dp, 0.0)


# -- ratio: w = g / (sum g + eps) ---------------------------------------------
def _ratio_update(carry, t, valid, v):
  m, l, acc = carry
  g = jnp.where(valid, t, 0.0)
  return m, l + jnp.sum(g, axis=-1, keepdims=True), acc + _pv_split(g, v)


def _pv_split(g, v):
  """``g @ v`` with ``g`` as a bf16 pair ``hi + lo`` (two MXU passes, ~16
  bits of ``g``) when ``v`` is low precision.

  Why not one rounded pass, as the other modes: with sign-changing ``g``
  (sin_max, siren_max, sin2_max_shifted's causal rows) ``sum|g| / Z``
  reaches 1e3. Rounding ``g`` for ``g @ v`` but not in ``Z`` makes ``o``
  inconsistent with the weights ``g / Z``, and the backward's ``di = do . o``
  amplifies that: bf16 dQ/dK were ~10x less accurate than the dense path.
  Rounding ``g`` in ``Z`` too keeps them consistent but moves ``Z`` itself
  when it is a small difference of large terms (sin_max: 50x worse ``o``).
  """
  if v.dtype == jnp.float32:
    return pv(g, v)
  hi = g.astype(v.dtype).astype(jnp.float32)
  return pv(hi, v) + pv(g - hi, v)


def pv_passes(mode: str, dtype) -> int:
  """MXU passes of the forward's ``w @ v`` (for the cost estimate)."""
  return 2 if mode == "ratio" and jnp.dtype(dtype) != jnp.float32 else 1


def _ratio_finish(carry, eps):
  _, l, acc = carry
  # core.safe_denominator: sum g + eps, pushed away from 0 on its own side.
  z = jnp.where(l >= 0, l + eps, l - eps)
  z = jnp.where(z == 0, 1.0, z)
  return acc / z, z, z


def _ratio_grad(t, valid, dp, z, _, di):
  w = jnp.where(valid, t, 0.0) / z
  return w, jnp.where(valid, (dp - di) / z, 0.0)


# -- exp: online softmax --------------------------------------------------------
def _exp_update(carry, t, valid, v):
  m, l, acc = carry
  m_new = jnp.maximum(m, jnp.max(jnp.where(valid, t, NEG), axis=-1,
                                 keepdims=True))
  corr = jnp.exp(m - m_new)
  # Masked entries replaced before exp: no Inf/NaN there (double where).
  e = jnp.where(valid, jnp.exp(jnp.where(valid, t, m_new) - m_new), 0.0)
  return (m_new, l * corr + jnp.sum(e, axis=-1, keepdims=True),
          acc * corr + pv(e, v))


def _exp_finish(carry, eps):
  m, l, acc = carry
  lse = jnp.where(l > 0, m + jnp.log(_nonzero(l)), 0.0)
  return acc / _nonzero(l), lse, lse


def _exp_grad(t, valid, dp, lse, _, di):
  w = jnp.where(valid, jnp.exp(jnp.where(valid, t, lse) - lse), 0.0)
  return w, w * (dp - di)


# -- softpick: relu(e^t - 1) / (sum |e^t - 1| + eps), scaled by e^-m ---------
def _softpick_update(carry, t, valid, v):
  m, l, acc = carry
  m_new = jnp.maximum(m, jnp.max(jnp.where(valid, t, NEG), axis=-1,
                                 keepdims=True))
  corr = jnp.exp(m - m_new)
  e = jnp.exp(jnp.where(valid, t, 0.0) - m_new) - jnp.exp(-m_new)
  num = jnp.where(valid, jnp.maximum(e, 0.0), 0.0)
  den = jnp.sum(jnp.where(valid, jnp.abs(e), 0.0), axis=-1, keepdims=True)
  return m_new, l * corr + den, acc * corr + pv(num, v)


def _softpick_finish(carry, eps):
  m, l, acc = carry
  den = _nonzero(l + eps * jnp.exp(-m))
  return acc / den, m, den


def _softpick_grad(t, valid, dp, m, den, di):
  t = jnp.where(valid, t, 0.0)
  et = jnp.exp(t - m)
  e = et - jnp.exp(-m)
  w = jnp.where(valid, jnp.maximum(e, 0.0), 0.0) / den
  de = (jnp.where(e > 0, dp, 0.0) - jnp.sign(e) * di) / den
  return w, jnp.where(valid, de * et, 0.0)


MODES = {
    "pointwise": Mode(_init, _pointwise_update, _pointwise_finish,
                      _pointwise_grad),
    "ratio": Mode(_init, _ratio_update, _ratio_finish, _ratio_grad),
    "exp": Mode(_init, _exp_update, _exp_finish, _exp_grad),
    # Running max starts at 0: softpick's reference point is max(row max, 0).
    "softpick": Mode(lambda bq, dv: _init(bq, dv, 0.0), _softpick_update,
                     _softpick_finish, _softpick_grad),
}
