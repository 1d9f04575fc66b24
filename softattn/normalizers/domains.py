"""The valid values of a normalizer parameter, declared as data.

Each ``Normalizer`` names a ``Domain`` per parameter (``domains={"gamma":
POSITIVE, ...}``); ``bind`` and every call check concrete values against it, so
``"normsoftmax(gamma=-1)"`` fails when the config is read, not as a NaN many
steps later. Traced values (learnable parameters inside ``jit``/``grad``) are
not checked: they are the model's to keep in range. The domain table is
appended to each normalizer's docstring, so the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class Domain:
  """Numbers in an interval, or one of a few words; optionally ``None``.

  Attributes:
    lo, hi: the interval's ends (``-inf``/``inf`` for none).
    lo_open, hi_open: whether ``lo``/``hi`` themselves are excluded.
    choices: when given, the value must be one of these strings instead.
    allow_none: ``None`` is valid (it selects a documented default rule).
    integer: the value must be a whole number (a count).
    note: why, in a few words (shown in the docstring and the error).
  """
  lo: float = -math.inf
  hi: float = math.inf
  lo_open: bool = False
  hi_open: bool = False
  choices: tuple[str, ...] | None = None
  allow_none: bool = False
  integer: bool = False
  note: str = ""

  def __str__(self):
    if self.choices is not None:
      text = "one of " + ", ".join(self.choices)
    else:
      text = "in " + (("(" if self.lo_open else "[") + _num(self.lo) + ", " +
              _num(self.hi) + (")" if self.hi_open else "]"))
    if self.integer:
      text = "an integer " + text
    return text + (" or None" if self.allow_none else "")

  def contains(self, x: float) -> bool:
    if math.isnan(x) or (self.integer and x != math.floor(x)):
      return False
    above = x > self.lo if self.lo_open else x >= self.lo
    below = x < self.hi if self.hi_open else x <= self.hi
    return above and below

  def check(self, owner: str, key: str, value: Any) -> None:
    """Raises ``ValueError`` naming the domain if ``value`` is outside it."""
    if value is None and self.allow_none:
      return
    why = f" ({self.note})" if self.note else ""
    bad = ValueError(f"{owner}: {key}={value!r} is invalid; it must be "
                     f"{self}{why}.")
    if self.choices is not None:
      if value not in self.choices:
        raise bad
      return
    factor = getattr(value, "factor", None)  # SqrtHeadDim: factor * sqrt(d)
    if factor is not None:
      # factor * sqrt(d) for some d >= 1: decidable now only for half-lines
      # from 0 (the case of every std clip); others wait for the head dim.
      if self.lo == 0 and self.hi == math.inf and not self.contains(factor):
        raise bad
      return
    if isinstance(value, (str, bool)) or value is None:
      raise bad
    try:
      values = np.asarray(value, dtype=np.float64).ravel()
    except (jax.errors.TracerArrayConversionError,
            jax.errors.ConcretizationTypeError):
      return  # learnable: only known inside the traced computation
    except (TypeError, ValueError):
      raise bad from None
    if not all(self.contains(float(v)) for v in values):
      raise bad


def _num(x: float) -> str:
  if math.isinf(x):
    return "inf" if x > 0 else "-inf"
  return f"{x:g}"


REAL = Domain(lo_open=True, hi_open=True)
POSITIVE = Domain(lo=0.0, lo_open=True)
NONNEGATIVE = Domain(lo=0.0, hi_open=True)
EPS = Domain(lo=0.0, hi_open=True,
             note="a stabiliser added to a variance or a denominator")
PASSES = Domain(lo=1.0, hi_open=True, integer=True,
                note="streaming passes over the keys, at most")
TOLERANCE = Domain(lo=0.0, lo_open=True, hi_open=True,
                   note="stop once every row's step is below tol * (1 + |tau|)")


def describe(domains) -> str:
  """The docstring section listing each parameter's domain."""
  if not domains:
    return ""
  lines = [f"      {k}: {d}" + (f" ({d.note})" if d.note else "")
           for k, d in domains.items()]
  return "\n    Parameter domains (checked by ``bind`` and on every call):\n" + (
      "\n".join(lines) + "\n")
