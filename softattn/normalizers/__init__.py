"""Attention normalizers: pure functions ``w = f(scores, *, mask=None, **params)``.

Every normalizer is a ``Normalizer`` object, callable like a function and
registered under its name; ``get(spec)`` accepts names and call-like strings
(``"normsoftmax(gamma=inf)"``), ``names()`` lists them. The math and its sources
are in each docstring (formula, paper and equation; *inferred* choices
marked), with each parameter's valid domain.

A normalizer is one declaration in a family module (``FAMILIES``): every
``Normalizer`` defined at a family module's top level is registered under its
name and exported here, so adding one needs no edit outside its family file
(README, "Adding a normalizer").
"""

from softattn.normalizers import (
    l1_normalized, periodic, pointwise, simplex, softmax_family)
from softattn.normalizers.core import (
    MODES, REQUIRED, Learnable, Normalizer, RowStats, SqrtHeadDim, merge_stats,
    row_stats, safe_denominator)
from softattn.normalizers.periodic import make_prenorm
from softattn.normalizers.pointwise import ACTIVATIONS
from softattn.normalizers.registry import (
    declared_in, get, markdown_table, names, register)

# The modules whose top-level Normalizers are the registry. A new family
# module is added here once; its declarations then register themselves.
FAMILIES = (softmax_family, pointwise, periodic, l1_normalized, simplex)

for _family in FAMILIES:
  for _n in declared_in(_family):
    register(_n)
    globals()[_n.name] = _n
del _family, _n


def prenorm(scores, *, mask=None, inner="softmax", eps=1e-5, **inner_params):
  """``inner((s - mean) / sqrt(var_unbiased + eps))`` over unmasked keys.

  The "norm-*" variants of Wang et al. 2021 as a plain function; ``inner`` is a
  normalizer name, spec or object. See ``make_prenorm``.
  """
  return make_prenorm(get(inner), eps)(scores, mask=mask, **inner_params)
