"""libtpu for the ahead-of-time TPU compile tests: present, or no wheel exists.

The README's test command installs the `test` extra, which brings `jax[tpu]`
(libtpu) on Linux x86_64, the only platform PyPI has libtpu wheels for. There a
missing libtpu is a broken environment, so the test fails with the fix; on
other platforms the test skips and names the platform.
"""

from __future__ import annotations

import importlib.util
import platform
import sys

import pytest

HAS_WHEEL = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


def require_libtpu() -> None:
  if importlib.util.find_spec("libtpu") is not None:
    return
  if HAS_WHEEL:
    pytest.fail("libtpu is not installed: pip install -e '.[test]' brings it "
                "(jax[tpu] at the installed jax) on Linux x86_64", pytrace=False)
  # Not a hidden failure: PyPI has no libtpu for this platform, so these
  # compiles cannot run here at all; CI and the README's x86_64 machines
  # install it and run them.
  pytest.skip(f"TPU AOT compiles need libtpu, which has no wheel for "
              f"{sys.platform}/{platform.machine()} (Linux x86_64 only)")
