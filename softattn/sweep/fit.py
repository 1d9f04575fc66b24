"""Saturating power law of error against compute, with its uncertainty.

The scaling curves of the ReLU-attention paper (Wortsman et al. 2023,
"Replacing softmax with ReLU in Vision Transformers", arXiv 2309.08586,
Fig. 1) plot error against
training compute for growing ViTs; we summarise each normalizer's curve by

.. math::

  \\mathrm{err}(C) = a + b\\,C^{-c},\\qquad a \\ge 0,\\ b \\ge 0,\\ c \\ge 0,

where :math:`a` is the error the family saturates at, :math:`c` how fast it
gets there. The fit is least squares in error space
(``scipy.optimize.curve_fit``, trust-region reflective with the bounds above).
Compute is divided by its geometric mean :math:`C_0` before fitting, because
:math:`C` spans ~1e9..1e18 FLOPs and :math:`C^{-c}` at those magnitudes makes
the problem numerically singular; :math:`b = b_0 C_0^{c}` is mapped back after,
its standard deviation propagated from the covariance by the delta method.

Uncertainty: one standard deviation per parameter from ``sqrt(diag(pcov))``,
with ``absolute_sigma=False`` (the covariance is scaled by the residual
variance, i.e. the scatter of the points around the curve sets the error bars).
This needs at least 4 points (3 parameters plus one degree of freedom); with
fewer, ``fit_power_law`` raises ``FitError`` saying so.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
from scipy import optimize

MIN_POINTS = 4


class FitError(ValueError):
  """The points cannot support a fit (too few, bad values, no convergence)."""


@dataclasses.dataclass(frozen=True)
class PowerLawFit:
  """``err(C) = a + b * C**-c`` and one-sigma uncertainties of each parameter."""
  a: float
  b: float
  c: float
  a_std: float
  b_std: float
  c_std: float
  c0: float  # the compute scale the fit used: b0 = b * c0**-c = err(c0) - a
  b0: float
  b0_std: float
  n: int
  rms: float  # root-mean-square residual

  def __call__(self, compute):
    x = np.asarray(compute, np.float64) / self.c0
    return self.a + self.b0 * x ** -self.c

  def summary(self) -> str:
    return (f"a={self.a:.4g}±{self.a_std:.2g}, c={self.c:.3g}±{self.c_std:.2g}, "
            f"b·C0^-c={self.b0:.3g}±{self.b0_std:.2g} at C0={self.c0:.3g}")


def _model(x, a, b0, c):
  return a + b0 * x ** -c


def fit_power_law(compute: Sequence[float], error: Sequence[float], *,
                  max_exponent: float = 10.0) -> PowerLawFit:
  """Fits ``error = a + b * compute**-c`` (see the module doc).

  Args:
    compute: positive, finite compute per point (FLOPs or core-seconds).
    error: finite errors in [0, 1] (e.g. ``1 - accuracy``).
    max_exponent: upper bound on ``c``.

  Returns:
    The fitted ``PowerLawFit``.

  Raises:
    FitError: fewer than ``MIN_POINTS`` points, fewer than 3 distinct compute
      values, non-positive or non-finite compute, non-finite error, or no
      convergence.
  """
  c_arr = np.asarray(compute, np.float64)
  e_arr = np.asarray(error, np.float64)
  if c_arr.shape != e_arr.shape or c_arr.ndim != 1:
    raise FitError(f"compute and error must be 1-D and equally long, got "
                   f"{c_arr.shape} and {e_arr.shape}.")
  if len(c_arr) < MIN_POINTS:
    raise FitError(f"{len(c_arr)} point(s); a 3-parameter fit with an "
                   f"uncertainty needs at least {MIN_POINTS} (add model sizes "
                   "or budgets to the sweep).")
  if not np.all(np.isfinite(c_arr)) or np.any(c_arr <= 0):
    raise FitError("compute must be positive and finite.")
  if not np.all(np.isfinite(e_arr)):
    raise FitError("error must be finite (failed runs are excluded first).")
  if len(np.unique(c_arr)) < 3:
    raise FitError(f"only {len(np.unique(c_arr))} distinct compute values; "
                   "the curve's 3 parameters need at least 3.")

  c0 = float(np.exp(np.mean(np.log(c_arr))))
  x = c_arr / c0
  a_init = 0.5 * float(e_arr.min())
  p0 = (a_init, max(float(e_arr.mean()) - a_init, 1e-6), 0.5)
  upper_a = float(e_arr.max())
  try:
    popt, pcov = optimize.curve_fit(
        _model, x, e_arr, p0=p0, method="trf", maxfev=20000,
        bounds=([0.0, 0.0, 0.0], [max(upper_a, 1e-12), np.inf, max_exponent]))
  except (RuntimeError, ValueError) as e:
    raise FitError(f"curve_fit did not converge: {e}") from None
  a, b0, c = (float(v) for v in popt)
  # With exactly as many points as parameters curve_fit returns inf
  # covariance (no residual degrees of freedom): that stays inf, honestly.
  std = np.sqrt(np.clip(np.diag(pcov), 0.0, np.inf))
  a_std, b0_std, c_std = (float(v) for v in std)
  # b = b0 * c0**c: d b / d b0 = c0**c, d b / d c = b * ln c0.
  scale = c0 ** c
  b = b0 * scale
  grad = np.array([scale, b * math.log(c0)])
  sub = pcov[np.ix_([1, 2], [1, 2])]
  b_var = float(grad @ sub @ grad) if np.all(np.isfinite(sub)) else math.inf
  rms = float(np.sqrt(np.mean((_model(x, a, b0, c) - e_arr) ** 2)))
  return PowerLawFit(a=a, b=b, c=c, a_std=a_std, b_std=math.sqrt(max(b_var, 0)),
                     c_std=c_std, c0=c0, b0=b0, b0_std=b0_std, n=len(c_arr),
                     rms=rms)
