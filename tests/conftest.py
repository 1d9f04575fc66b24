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

# XLA's CPU fusion emitters (MLIR-based, the default) take about twice as long
# to compile these small programs as the legacy elemental emitters:
# test_pallas, test_attention and test_normalizers together take 160 s at
# -n 2 with them and 82 s without (benchmarks/README.md, "Test suite"). Both
# emit the same HLO fusions with the same math; the tests compare paths
# within one process or against float64, never against another emitter's
# bits. XLA aborts a process on a flag it does not know, and a future XLA may
# drop this one, so it is probed once (a child process) and used only where
# it exists; inherited by xdist workers and the processes the tests launch.
# SOFTATTN_TEST_FAST_CPU_COMPILE=0 turns it off.
_FAST_FLAG = "--xla_cpu_use_fusion_emitters=false"


def _with_fast_cpu_compile() -> None:
  if os.environ.get("SOFTATTN_TEST_FAST_CPU_COMPILE", "1") == "0":
    return
  if os.environ.get("SOFTATTN_TEST_FAST_CPU_COMPILE") == "checked":
    return  # decided by the process that started this one (an xdist worker)
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  flags = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_FLAG}".strip()
  probe = subprocess.run(
      [sys.executable, "-c", "import jax; jax.numpy.ones(2).block_until_ready()"],
      env=dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu"),
      capture_output=True, timeout=120, check=False)
  if probe.returncode == 0:
    os.environ["XLA_FLAGS"] = flags
  os.environ["SOFTATTN_TEST_FAST_CPU_COMPILE"] = "checked"


_with_fast_cpu_compile()

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


def pytest_addoption(parser):
  parser.addoption("--compile-tally", default=None, metavar="FILE",
                   help="write each test's wall time and jax trace/lower/"
                   "compile seconds to FILE.<worker> (tests/compile_tally.py)")


def pytest_configure(config):
  path = config.getoption("--compile-tally")
  if path:
    from tests import compile_tally  # pylint: disable=g-import-not-at-top
    config.pluginmanager.register(compile_tally.Tally(os.path.abspath(path)),
                                  "compile_tally")


# The inner loop, ``pytest -n 2 -m "not slow"`` (about 3 minutes on 2 cores,
# the library's unit tests: normalizers, attention paths, kernels in the
# Pallas interpreters, models, steps, configs), leaves out the files whose
# tests are end to end: real training runs, subprocesses and servers, TPU
# ahead-of-time compiles. CI runs everything. The studies' tests
# (experiments/, end to end too) are marked by experiments/conftest.py, so
# they are left out however pytest is started.
E2E_FILES = frozenset({
    "test_aot.py", "test_aot_collectives.py", "test_configs.py",
    "test_data_prepare.py", "test_dense_tpu_traffic.py", "test_faults.py",
    "test_faults_cli.py", "test_faults_data.py", "test_faults_sweep.py",
    "test_fsdp.py", "test_gcs.py", "test_imagenet21k.py", "test_multihost.py",
    "test_pallas_aot.py", "test_sweep_e2e.py", "test_sweep_runner.py",
    "test_train.py"})


def pytest_collection_modifyitems(config, items):
  del config
  for item in items:
    # The notebook's execution is end to end too: -m "not slow" replaces
    # pyproject's -m "not notebook", and should still leave it out.
    if item.path.name in E2E_FILES or item.get_closest_marker("notebook"):
      item.add_marker(pytest.mark.slow)
