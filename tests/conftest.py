"""Fixtures shared by the test modules."""

import jax
import pytest


@pytest.fixture
def full_f32_matmuls():
  """float32 matmuls at full precision for the test: on GPU, XLA (and
  Triton) run DEFAULT-precision f32 dots in TF32, ~1e-3 relative (seen on an
  H200), so two f32 paths compared at f32 tolerance would differ by TF32's
  rounding, not by a bug. On CPU it changes nothing; no test that compiles
  for a TPU topology uses it (there it would change the compiled program)."""
  with jax.default_matmul_precision("highest"):
    yield
