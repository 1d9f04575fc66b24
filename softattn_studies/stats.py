"""The statistics behind every verdict: paired t tests, TOST, t intervals.

All tests take per-seed (per pairing key) differences ``d_1..d_n`` of one
metric between two settings. With ``m`` the mean, ``s`` the sample std and
``se = s / sqrt(n)``:

* ``paired_t``: ``t = (m - null) / se`` on ``n - 1`` degrees of freedom;
  one-sided p-values for ``greater`` / ``less``, two-sided otherwise;
* ``tost``: two one-sided tests against a margin ``delta`` around ``center``
  (Schuirmann 1987): equivalence is shown when both ``H0: m <= c - delta``
  and ``H0: m >= c + delta`` are rejected; ``p = max`` of the two. Its
  converse ``outside``: the one-sided test that ``|m - c| > delta``;
* ``t_interval``: the two-sided ``1 - alpha`` interval ``m +- t * se``.

When the differences do not vary (``s == 0``, e.g. two settings that give
the same number in every seed) the t statistic is infinite or undefined: the
p-values are then 0 or 1 by the sign of ``m - null`` (0.5 when equal), and
the interval collapses to ``m``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Sequence

import numpy as np
from scipy import stats as sps


@dataclasses.dataclass(frozen=True)
class Summary:
  """Mean, sample std and two-sided 95 % t interval of ``n`` values."""
  mean: float | None
  std: float | None
  n: int
  ci: tuple[float, float] | None

  @property
  def half(self) -> float | None:
    return None if self.ci is None else (self.ci[1] - self.ci[0]) / 2


def summarize(values: Sequence[float | None], alpha: float = 0.05
              ) -> Summary:
  """Mean, std and t interval of the finite values (None are skipped)."""
  v = np.asarray([x for x in values if x is not None and math.isfinite(x)],
                 float)
  if v.size == 0:
    return Summary(None, None, 0, None)
  std = float(v.std(ddof=1)) if v.size > 1 else None
  return Summary(float(v.mean()), std, int(v.size), t_interval(v, alpha))


def t_interval(values, alpha: float = 0.05) -> tuple[float, float] | None:
  v = np.asarray(values, float)
  if v.size < 2:
    return None
  m, se = float(v.mean()), float(v.std(ddof=1)) / math.sqrt(v.size)
  half = float(sps.t.ppf(1 - alpha / 2, v.size - 1)) * se
  return (m - half, m + half)


def paired_t(diffs, alternative: str = "two-sided", null: float = 0.0
             ) -> float:
  """p-value of the paired t test of ``mean(diffs) = null`` (scipy's
  one-sample t test on the differences)."""
  d = np.asarray(diffs, float)
  if d.size < 2:
    raise ValueError(f"a paired t test needs 2+ differences, got {d.size}")
  if alternative not in ("greater", "less", "two-sided"):
    raise ValueError(f"alternative={alternative!r}; use greater, less or "
                     "two-sided")
  with warnings.catch_warnings():   # zero variance: t is +-inf or nan
    warnings.simplefilter("ignore", RuntimeWarning)
    p = float(sps.ttest_1samp(d, null, alternative=alternative).pvalue)
  if math.isnan(p):   # mean == null with zero variance
    return 1.0 if alternative == "two-sided" else 0.5
  return p


def tost(diffs, margin: float, center: float = 0.0) -> float:
  """TOST p-value for ``|mean(diffs) - center| < margin`` (small: shown)."""
  if margin <= 0:
    raise ValueError(f"an equivalence margin must be > 0, got {margin}")
  return max(paired_t(diffs, "greater", center - margin),
             paired_t(diffs, "less", center + margin))


def outside(diffs, margin: float, center: float = 0.0) -> float:
  """p-value of the one-sided test that the mean lies outside the margin
  on the side where the observed mean lies (small: non-equivalence shown)."""
  d = np.asarray(diffs, float)
  if d.mean() >= center:
    return paired_t(d, "greater", center + margin)
  return paired_t(d, "less", center - margin)
