"""Tile math with per-row values as vectors: how the mode table's
``[b, 1]`` columns reach Mosaic GPU.

The shared math (``softattn.modes``, the normalizers' transforms,
``common/tile.py``) holds per-row values as ``[b, 1]`` columns (and key
masks as ``[1, n]`` rows) that broadcast against ``[b, n]`` tiles. Mosaic
GPU's register layouts have no ``[b, 1]`` array: a row statistic is a
``[b]`` vector in ``WGMMA.reduce(1)`` layout, broadcast explicitly (lowering
a ``keepdims`` reduce fails: "Tiling ... does not apply to shape (64, 1)").

``run(fn, *args)`` traces ``fn`` with its thin arguments (``Col(x)``/
``Row(x)``, ``x`` a vector) at their 2-D shapes and evaluates the jaxpr
with every thin value kept as a vector: a broadcast from a thin value to a
tile becomes ``broadcast_in_dim(x, (b, n), (axis,))``, reshapes and
broadcasts between a vector and a thin value are the identity, every other
primitive binds on the vectors (or on widened tiles when its output is a
tile). Thin outputs come back as vectors. Two more rewrites, for Mosaic
GPU's lowering: ``stop_gradient`` is dropped (``fn``'s own VJP is already in
the jaxpr), and primitives it cannot lower become ones it can
(``_SUBSTITUTES``: ``sqrt``, ``pow``, ``log1p``, ``erf``, ...). The
interpreter runs the rewritten program too, so the tests check the
formulation that lowers.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp
from jax import lax


class Col(NamedTuple):
  """A ``[b]`` vector that ``fn`` sees as a ``[b, 1]`` column."""
  x: jax.Array


class Row(NamedTuple):
  """An ``[n]`` vector that ``fn`` sees as a ``[1, n]`` row."""
  x: jax.Array


def _kept(aval):
  """The axis a thin 2-D aval keeps (0: ``[b, 1]``, 1: ``[1, n]``), else
  None."""
  shape = getattr(aval, "shape", ())
  if len(shape) != 2 or (shape[0] == 1) == (shape[1] == 1):
    return None
  return 0 if shape[1] == 1 else 1


def _widen(x, aval, shape):
  kept = _kept(aval)
  if kept is None:
    return x
  return lax.broadcast_in_dim(x, shape, (kept,))


def _pow(x, y):
  """``x ** y`` from ``exp``/``log`` (real ``pow`` semantics: ``0 ** 0 =
  1``, a negative base with an integer exponent keeps its sign). Both
  broadcast first: Mosaic GPU's ``select_n`` takes no scalar predicate."""
  shape = jnp.broadcast_shapes(jnp.shape(x), jnp.shape(y))
  x, y = jnp.broadcast_to(x, shape), jnp.broadcast_to(y, shape)
  r = jnp.exp(y * jnp.log(jnp.abs(x)))
  r = jnp.where(y == 0, 1.0, r)
  yi = jnp.round(y)
  odd = jnp.abs(yi - 2.0 * jnp.round(yi / 2.0)) == 1.0
  neg = jnp.where(yi == y, jnp.where(odd, -r, r), jnp.nan)
  return jnp.where(x < 0, neg, r)


def _integer_pow(x, *, y):
  if y in (0, 1):
    return jnp.ones_like(x) if y == 0 else x
  if y == -1 or y > 1:
    return lax.integer_pow(x, y)
  return 1.0 / lax.integer_pow(x, -y)


def _erf(x, **_):
  """Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7: Mosaic GPU of jax 0.12
  has no layout rule for ``math.erf`` ("No layout inference rule defined";
  jax 0.10 lowered it). Its derivative is not this one's: the jaxpr holds
  ``erf``'s own VJP (``exp(-x^2)`` terms), evaluated exactly."""
  a = jnp.abs(x)
  t = 1.0 / (1.0 + 0.3275911 * a)
  poly = t * (0.254829592 + t * (-0.284496736 + t * (
      1.421413741 + t * (-1.453152027 + t * 1.061405429))))
  return jnp.sign(x) * (1.0 - poly * jnp.exp(-a * a))


# Primitives Mosaic GPU cannot lower (jax 0.10-0.12), in ones it can:
# ``1 / rsqrt`` is exact at 0 (``1 / inf``), unlike ``x rsqrt(x)``;
# ``log1p``/``expm1`` lose their accuracy near 0 (absolute error ~1 ulp of
# 1, what the normalizers that use them tolerate).
_SUBSTITUTES = {
    "sqrt": lambda x, **_: 1.0 / lax.rsqrt(x),
    "log1p": lambda x, **_: jnp.log(1.0 + x),
    "expm1": lambda x, **_: jnp.exp(x) - 1.0,
    "add_any": lambda x, y: lax.add(x, y),
    "pow": lambda x, y: _pow(x, y),
    "integer_pow": _integer_pow,
    "erf": _erf,
}


_IDENTITY = {"reshape", "squeeze", "expand_dims", "copy", "copy_p"}
_CALLS = ("jaxpr", "call_jaxpr", "fun_jaxpr")


def _inner(eqn):
  for name in _CALLS:
    inner = eqn.params.get(name)
    if isinstance(inner, jex_core.ClosedJaxpr):
      return inner.jaxpr, inner.consts
    if isinstance(inner, jex_core.Jaxpr):
      return inner, ()
  return None


def _eqn(eqn, invals):
  in_avals = [v.aval for v in eqn.invars]
  out_avals = [v.aval for v in eqn.outvars]
  thin_in = [_kept(a) is not None for a in in_avals]
  thin_out = [_kept(a) is not None for a in out_avals]
  inner = _inner(eqn)
  if inner is not None:  # jit, custom_jvp/vjp calls: their bodies, the same way
    return evaluate(inner[0], inner[1], *invals)
  name = eqn.primitive.name
  if name == "stop_gradient":  # AD is done (fn's vjp is in the jaxpr)
    return list(invals)
  if not any(thin_in) and not any(thin_out):
    return _bind(eqn, invals)
  if name == "broadcast_in_dim":
    (x,), (aval,) = invals, in_avals
    if thin_out[0]:  # scalar, vector or thin -> thin: a vector
      size = max(out_avals[0].shape)
      return [x if getattr(aval, "shape", ()) else lax.broadcast_in_dim(
          x, (size,), ())]
    return [_widen(x, aval, out_avals[0].shape)]
  if name in _IDENTITY and len(invals) == 1:
    return [invals[0]]
  if name.startswith("reduce_") and thin_in[0] and not thin_out[0]:
    axes = eqn.params["axes"]
    if _kept(in_avals[0]) not in axes:  # reducing the size-1 axis
      return [invals[0]]
  # Every normalizer of the mode table traces through the branches above
  # (tests/test_pallas_mosaic_gpu.py runs them all); a new transform that
  # does neither gets one line naming the way around it.
  if any(thin_out) and not all(thin_out):
    raise ValueError(_unkept(name, "mixes [b, 1] and [b, bk] outputs"))
  if thin_out and thin_out[0]:
    if name in ("iota", "reduce_sum", "reduce_max", "reduce_min",
                "transpose", "dot_general", "concatenate"):
      raise ValueError(_unkept(name, "on a [b, 1] value"))
    return _bind(eqn, invals)
  shape = out_avals[0].shape  # a tile out: thin operands widened to it
  return _bind(eqn, [_widen(x, a, shape) for x, a in zip(invals, in_avals)])


def _unkept(name: str, what: str) -> str:
  return (f"the Mosaic GPU kernels cannot keep this normalizer's {name} "
          f"({what}) as a row vector (pallas/gpu/mosaic/columns.py); run it "
          "with SOFTATTN_GPU_KERNELS=triton or implementation='chunked'")


def _bind(eqn, args):
  sub = _SUBSTITUTES.get(eqn.primitive.name)
  if sub is not None:
    return [sub(*args, **eqn.params)]
  out = eqn.primitive.bind(*args, **eqn.params)
  return out if eqn.primitive.multiple_results else [out]


def evaluate(jaxpr, consts, *args):
  env = {}

  def read(v):
    return v.val if isinstance(v, jex_core.Literal) else env[v]

  for var, val in zip(jaxpr.constvars, consts):
    env[var] = val
  for var, val in zip(jaxpr.invars, args):
    env[var] = val
  for eqn in jaxpr.eqns:
    outs = _eqn(eqn, [read(v) for v in eqn.invars])
    for var, val in zip(eqn.outvars, outs):
      env[var] = val
  return [read(v) for v in jaxpr.outvars]


def _is_thin(x):
  return isinstance(x, (Col, Row))


def run(fn, *args):
  """``fn(*args)`` with ``Col``/``Row`` leaves seen as ``[b, 1]``/``[1, n]``
  and every thin result returned as a vector (None results stay None)."""
  leaves, tree = jax.tree.flatten(args, is_leaf=_is_thin)

  def spec(x):
    if isinstance(x, Col):
      return jax.ShapeDtypeStruct((x.x.shape[0], 1), x.x.dtype)
    if isinstance(x, Row):
      return jax.ShapeDtypeStruct((1, x.x.shape[0]), x.x.dtype)
    return jax.ShapeDtypeStruct(jax.numpy.shape(x), jax.numpy.result_type(x))

  def flat_fn(*xs):
    return fn(*jax.tree.unflatten(tree, xs))

  closed, out_shape = jax.make_jaxpr(flat_fn, return_shape=True)(
      *[spec(x) for x in leaves])
  values = [x.x if _is_thin(x) else x for x in leaves]
  outs = evaluate(closed.jaxpr, closed.consts, *values)
  return jax.tree.unflatten(jax.tree.structure(out_shape), outs)
