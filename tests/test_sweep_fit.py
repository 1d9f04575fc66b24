"""The saturating power-law fit recovers known parameters and says when it can't."""

import numpy as np
import pytest

from softattn.sweep import fit as fit_lib

A, B, C = 0.08, 3.0e3, 0.3  # err(C) = 0.08 + 3e3 * C^-0.3
COMPUTE = np.logspace(12, 17, 10)  # FLOPs of small-to-mid ViT runs


def _err(compute):
  return A + B * compute ** -C


def test_recovers_exact_parameters_from_noise_free_points():
  f = fit_lib.fit_power_law(COMPUTE, _err(COMPUTE))
  np.testing.assert_allclose([f.a, f.b, f.c], [A, B, C], rtol=1e-5)
  # A perfect fit has (numerically) zero scatter, hence ~zero uncertainty.
  assert f.rms < 1e-8 and f.a_std < 1e-6 and f.c_std < 1e-6
  np.testing.assert_allclose(f(COMPUTE), _err(COMPUTE), rtol=1e-6)
  assert f.n == len(COMPUTE)


def test_noisy_points_give_estimates_within_their_uncertainty():
  rng = np.random.default_rng(0)
  hits = {"a": 0, "c": 0}
  for _ in range(20):
    err = _err(COMPUTE) + rng.normal(0.0, 0.003, COMPUTE.shape)
    f = fit_lib.fit_power_law(COMPUTE, err)
    assert 0 < f.a_std < 0.05 and 0 < f.c_std < 0.5 and 0 < f.b_std
    hits["a"] += abs(f.a - A) < 2 * f.a_std
    hits["c"] += abs(f.c - C) < 2 * f.c_std
  # Two-sigma intervals should cover the truth most of the time (~95%); a
  # wrong covariance (unscaled, or of the rescaled problem) misses this.
  assert hits["a"] >= 15 and hits["c"] >= 15, hits


def test_b_is_mapped_back_to_raw_compute_units():
  f = fit_lib.fit_power_law(COMPUTE, _err(COMPUTE))
  # b0 is the curve's excess over a at the reference compute C0.
  np.testing.assert_allclose(f.b0, B * f.c0 ** -C, rtol=1e-5)
  np.testing.assert_allclose(f(f.c0), A + f.b0, rtol=1e-9)


@pytest.mark.parametrize("compute,error,match", [
    ([1e9, 1e10, 1e11], [0.3, 0.2, 0.15], "at least 4"),
    ([1e9, 1e9, 1e10, 1e10], [0.3, 0.31, 0.2, 0.21], "distinct compute"),
    ([1e9, -1e10, 1e11, 1e12], [0.3, 0.2, 0.15, 0.1], "positive"),
    ([1e9, 1e10, 1e11, 1e12], [0.3, float("nan"), 0.15, 0.1], "finite"),
])
def test_bad_points_are_refused_with_the_reason(compute, error, match):
  with pytest.raises(fit_lib.FitError, match=match):
    fit_lib.fit_power_law(compute, error)
