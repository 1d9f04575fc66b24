"""XLA's cost analysis of a compiled program, as one dict.

``jax.stages.Compiled.cost_analysis()`` returns a dict of properties
(``"flops"``, ``"bytes accessed"``, ...), but on some jax versions and
backends a list with one dict per program, or ``None`` (or an empty list)
when the backend has no analysis. Every reader of it goes through
``cost_analysis`` here.
"""

from __future__ import annotations

from typing import Any


def cost_analysis(compiled) -> dict[str, Any]:
  """``compiled.cost_analysis()`` as a dict: its first program's when jax
  gives a list, ``{}`` when it gives nothing."""
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  return dict(cost or {})
