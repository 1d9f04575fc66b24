"""Attention normalizers: pure functions ``w = f(scores, *, mask=None, **params)``.

Every normalizer is a ``Normalizer`` object, callable like a function and
registered under its name; ``get(spec)`` accepts names and call-like strings
(``"normsoftmax(gamma=inf)"``), ``names()`` lists them. The math and its sources
are in each docstring (formula, paper and equation; *inferred* choices
marked), with each parameter's valid domain.
"""

from softattn.normalizers.core import (
    MODES, REQUIRED, Normalizer, RowStats, SqrtHeadDim, merge_stats, row_stats,
    safe_denominator)
from softattn.normalizers.l1_normalized import lssa, lssar, stablemax
from softattn.normalizers.periodic import (
    cos_max, make_prenorm, sin2_max, sin2_max_shifted, sin_max,
    sin_max_constant, sin_softmax, siren_max, taylor_softmax)
from softattn.normalizers.pointwise import (
    ACTIVATIONS, consmax, laplace, nap, polynomial, relu_seqlen, scaled,
    sigmoid)
from softattn.normalizers.registry import get, names, register
from softattn.normalizers.simplex import entmax15, sparsemax, stick_breaking
from softattn.normalizers.softmax_family import (
    cog, logitnorm, normsoftmax, normsoftmax_inverse, normsoftmax_learnable,
    softmax, softmax_1, softmax_sink, softpick, ssmax)

for _n in (softmax, normsoftmax, normsoftmax_learnable, normsoftmax_inverse,
           logitnorm, relu_seqlen, scaled, sin_max, sin_max_constant, cos_max,
           sin2_max, sin2_max_shifted, sin_softmax, siren_max, sigmoid, ssmax,
           softpick, stick_breaking, taylor_softmax, sparsemax, entmax15, nap,
           softmax_1, softmax_sink, cog, stablemax, consmax, lssa, lssar,
           laplace, polynomial):
  register(_n)
del _n


def prenorm(scores, *, mask=None, inner="softmax", eps=1e-5, **inner_params):
  """``inner((s - mean) / sqrt(var_unbiased + eps))`` over unmasked keys.

  The "norm-*" variants of Wang et al. 2021 as a plain function; ``inner`` is a
  normalizer name, spec or object. See ``make_prenorm``.
  """
  return make_prenorm(get(inner), eps)(scores, mask=mask, **inner_params)
