"""Analytic FLOPs: 2 x the multiply-adds of every matmul and convolution in a jaxpr.

Used to check XLA's ``cost_analysis()`` of a compiled, partitioned step: the
count is taken from the *unpartitioned* program, so per-chip FLOPs x chips
well above it means work repeated on every chip (e.g. a global-batch matmul
that should have been split), and well below it means work XLA's cost model
does not see.

Why the jaxpr and not per-model formulas (ViT ``24 L n d^2 + 4 L n^2 d``,
ResNet tables): the jaxpr of the train step is what JAX differentiated, so
it counts the backward pass exactly -- including what a formula's "3 x
forward" gets wrong: no input gradient for the first layer (the images are
not differentiated), recomputation under ``jax.checkpoint``, the
NormSoftmax/gated-attention extras -- and it covers every model in
``softattn.models`` without a formula per model. What it leaves out are
elementwise ops (norms, activations, the optimizer update): a few percent
for full-size models, which is why XLA's count is expected slightly above.
Under remat the recomputed forward is in the jaxpr and is counted: that is
what the chip executes (and what XLA counts), but not "model FLOPs", so a
utilisation computed from it is hardware FLOPs utilisation (``has_remat``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
from jax.extend import core as jex_core


def _dot_flops(eqn) -> float:
  # Every output element (batch x lhs-free x rhs-free) is a dot product over
  # the contracting dimensions.
  lhs = eqn.invars[0].aval.shape
  (lhs_contract, _), _ = eqn.params["dimension_numbers"]
  contract = math.prod(lhs[i] for i in lhs_contract)
  return 2.0 * math.prod(eqn.outvars[0].aval.shape) * contract


def _conv_flops(eqn) -> float:
  # Every output element is a dot over (kernel window x input features of
  # its group): kernel elements / output features.
  out = eqn.outvars[0].aval.shape
  kernel = eqn.invars[1].aval.shape
  dn = eqn.params["dimension_numbers"]
  out_features = kernel[dn.rhs_spec[0]]
  return 2.0 * math.prod(out) * math.prod(kernel) / out_features


def _sub_jaxprs(eqn):
  for v in eqn.params.values():
    for item in (v if isinstance(v, (tuple, list)) else (v,)):
      if isinstance(item, jex_core.ClosedJaxpr):
        yield item.jaxpr
      elif isinstance(item, jex_core.Jaxpr):
        yield item


def jaxpr_matmul_flops(jaxpr) -> float:
  """2 x MACs of every ``dot_general`` / ``conv_general_dilated`` in ``jaxpr``.

  Descends into sub-jaxprs (``pjit``, ``custom_vjp``, ``checkpoint``, ...);
  a ``pallas_call`` counts its declared ``CostEstimate`` FLOPs;
  a ``scan`` body counts ``length`` times, a ``while`` body once (its trip
  count is not static), ``cond`` its most expensive branch.
  """
  total = 0.0
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name == "dot_general":
      total += _dot_flops(eqn)
    elif name == "conv_general_dilated":
      total += _conv_flops(eqn)
    elif name == "pallas_call":
      # A kernel's body is one grid step, not the call: count what the
      # kernel declares for the whole call (softattn.pallas gives every
      # kernel a pl.CostEstimate of its matmuls), as XLA's cost analysis does.
      cost = eqn.params.get("cost_estimate")
      total += float(cost.flops) if cost is not None else 0.0
    elif name == "cond":
      total += max(jaxpr_matmul_flops(b.jaxpr) for b in eqn.params["branches"])
    else:
      times = eqn.params.get("length", 1) if name == "scan" else 1
      total += times * sum(jaxpr_matmul_flops(j) for j in _sub_jaxprs(eqn))
  return total


_REMAT = ("checkpoint", "remat", "remat2")


def has_remat(jaxpr) -> bool:
  """Whether ``jaxpr`` recomputes anything (``jax.checkpoint`` / ``nn.remat``)."""
  return any(eqn.primitive.name in _REMAT
             or any(has_remat(j) for j in _sub_jaxprs(eqn))
             for eqn in jaxpr.eqns)


def matmul_flops(fn, *args: Any) -> float:
  """:func:`jaxpr_matmul_flops` of ``fn(*args)`` (arrays or ShapeDtypeStructs)."""
  return jaxpr_matmul_flops(jax.make_jaxpr(fn)(*args).jaxpr)
