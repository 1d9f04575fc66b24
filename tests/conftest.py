"""Fixtures shared by the test modules, and the suite's compile settings."""

import os

# The suite compiles thousands of tiny programs and runs each a few times, so
# XLA's optimization work (LLVM at -O2 on CPU) costs more than it saves: with
# jax's "disable most optimizations" (backend optimization level 0, no
# expensive LLVM passes) the suite takes about a third less time. The HLO
# passes still run, so programs, their numerics (no fast-math either way),
# cost and memory analyses are the same; TPU programs compiled through libtpu
# come out byte-identical (checked on a v5e's softmax attention gradient,
# dense and Pallas). Set before jax is imported, and inherited by the
# processes the tests launch; JAX_DISABLE_MOST_OPTIMIZATIONS=0 turns it off.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture
def full_f32_matmuls():
  """float32 matmuls at full precision for the test: on GPU, XLA (and
  Triton) run DEFAULT-precision f32 dots in TF32, ~1e-3 relative (seen on an
  H200), so two f32 paths compared at f32 tolerance would differ by TF32's
  rounding, not by a bug. On CPU it changes nothing; no test that compiles
  for a TPU topology uses it (there it would change the compiled program)."""
  with jax.default_matmul_precision("highest"):
    yield
