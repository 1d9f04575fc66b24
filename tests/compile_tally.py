"""Where the suite's time goes: jax's tracing, lowering and compiling, per test.

``pytest --compile-tally=FILE`` (registered in ``tests/conftest.py``) adds up
jax's own duration events (``jax.monitoring``: ``jaxpr_trace_duration``,
``jaxpr_to_mlir_module_duration``, ``backend_compile_duration``) for each
test, fixtures included, in this process, and writes one JSON line per test
to ``FILE.<worker>`` (xdist workers each write their own) with the test's
wall time beside them. Subprocesses a test starts are not counted: their time
is the test's wall time less its in-process compile time.
``benchmarks/suite_time.py`` joins the files into a table.
"""

from __future__ import annotations

import collections
import json
import os
import time

import pytest

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace_s",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
          "/jax/core/compile/backend_compile_duration": "compile_s"}


class Tally:
  """The pytest plugin: one record per test, appended as it finishes."""

  def __init__(self, path: str):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    self.path = f"{path}.{worker}"
    self.current = collections.Counter()
    import jax  # pylint: disable=g-import-not-at-top
    jax.monitoring.register_event_duration_secs_listener(self._on_event)

  def _on_event(self, event: str, duration: float, **_) -> None:
    key = EVENTS.get(event)
    if key:
      self.current[key] += duration
      if key == "compile_s":
        self.current["compiles"] += 1

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_protocol(self, item, nextitem):
    del nextitem
    self.current = collections.Counter()
    start = time.perf_counter()
    yield
    record = {"test": item.nodeid, "wall_s": time.perf_counter() - start,
              **{k: round(v, 4) for k, v in self.current.items()}}
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps(record) + "\n")
