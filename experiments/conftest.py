"""pytest's wiring for the studies' tests (``experiments/<study>/test_*.py``,
``experiments/test_all_studies.py``; their helpers:
``softattn_studies/testing.py``).

Every test here is end to end (declared sweeps resolved and their models
built, reports regenerated, probes run on trained checkpoints), so each is
marked slow, as ``tests/conftest.py:E2E_FILES`` marks the library's
end-to-end files: the inner loop (``-m "not slow"``) leaves them out
however pytest is started, a new study's tests included. Each runs in the
repository root, where the studies' sweep specs
(``experiments/<study>/sweep.py``) and base configs (``configs/``) resolve.

Nothing here imports jax (``tests/conftest.py`` sets the suite's compile
settings before jax is imported).
"""

import pathlib

import pytest

# The shared checks in softattn_studies.testing (regenerate's) report their
# values on failure, as a test module's asserts do.
pytest.register_assert_rewrite("softattn_studies.testing")

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
  monkeypatch.chdir(REPO)


def pytest_collection_modifyitems(items):
  # pytest calls this hook with every collected item, the library's too.
  for item in items:
    if HERE in item.path.resolve().parents:
      item.add_marker(pytest.mark.slow)
