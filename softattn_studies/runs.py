"""What the studies compute on run records, and ``merge`` of runs.csv files.

A study's runs are ``softattn.sweep.records.RunRecord``s: ``study.export``
reads every declared run of each part from ``<workdir>/<part>/<run name>``
(``records.collect``) and stores them in ``runs.csv`` (``records.write_csv``;
its columns are in ``softattn.sweep.records``), so a report can be
regenerated from ``runs.csv`` alone (``report.py --from-csv``). Here:
``select`` (runs by setting), ``merge`` (add the runs of a committed
``runs.csv``), the study's derived per-run values (``median_train``,
``step_ms``, ``diverged_or_below``, ``per_layer``), ``layer_curves`` and
the run and cost summaries RESULTS.md shows.
"""

from __future__ import annotations

import collections
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from softattn.runstate import State
from softattn.sweep.records import RunRecord


def select(runs: Iterable[RunRecord], where: Mapping[str, Any]
           ) -> list[RunRecord]:
  """Runs whose settings equal ``where`` (``{"part": "models",
  "model.variant": "B"}``); a tuple value matches any of its items."""
  match = lambda got, v: got in v if isinstance(v, tuple) else got == v
  return [r for r in runs if all(match(r.get(k), v)
                                 for k, v in where.items())]


def merge(runs: Sequence[RunRecord], kept: Sequence[RunRecord]
          ) -> list[RunRecord]:
  """``runs`` with each run that has not started taken from ``kept`` (a
  committed ``runs.csv``) where that has the same part and name: a study
  resumed on a machine without its old workdir adds runs to the committed
  ones. Only declared runs are kept; a run started in the workdir wins."""
  old = {(r.part, r.name): r for r in kept
         if r.state != State.NOT_STARTED}
  return [old.get((r.part, r.name), r) if r.state == State.NOT_STARTED
          else r for r in runs]


def median_train(metric: str, skip_first: int = 1):
  """A ``values`` entry: median of a train metric over the logged steps,
  skipping the first ``skip_first`` (compilation), for finished runs."""
  def fn(run: RunRecord) -> float | None:
    if not run.done:
      return None
    _, v = run.curve(metric)
    v = v[skip_first:] if v.size > skip_first else v
    return float(np.median(v)) if v.size else None
  return fn


def step_ms(run: RunRecord) -> float | None:
  """A ``values`` entry: the median train step in ms (from the logged
  ``steps_per_sec``, compilation skipped), for finished runs."""
  sps = median_train("steps_per_sec")(run)
  return 1000.0 / sps if sps else None


def diverged_or_below(column: str, threshold):
  """A ``values`` entry, 1 or 0: whether the run diverged or ended with
  ``column`` (e.g. ``final/accuracy``) below ``threshold``, a number or a
  function of the run (e.g. twice chance on its dataset): what a
  "collapses" or "breaks down" claim counts. None without either."""
  def fn(run: RunRecord) -> float | None:
    if run.diverged:
      return 1.0
    v = run.value(column)
    if v is None:
      return None
    return float(v < (threshold(run) if callable(threshold) else threshold))
  return fn


def _depth_order(key: str) -> list:
  """A layer path's sort key: the numbers in it compared as numbers, so
  ``encoderblock_10`` follows ``encoderblock_9``."""
  return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key)]


def layer_curves(run: RunRecord, metric: str, min_points: int = 1
                 ) -> list[np.ndarray]:
  """The values of each layer's diagnostic ``diag/<layer>/<metric>`` over
  training, shallowest layer first, of the curves with ``min_points`` or
  more; [] until the run finished."""
  if not run.done:
    return []
  keys = sorted(run.keys("diag/", "/" + metric), key=_depth_order)
  return [v for k in keys if (v := run.curve(k)[1]).size >= min_points]


def per_layer(metric: str, fn: Callable[[np.ndarray], float | None] =
              np.mean, min_points: int = 1):
  """A ``values`` entry: the mean over layers of ``fn`` of each layer's
  curve (``layer_curves``; layers where ``fn`` gives None left out), for
  finished runs; by default the mean over training and layers."""
  def value(run: RunRecord) -> float | None:
    vals = [x for v in layer_curves(run, metric, min_points)
            if (x := fn(v)) is not None]
    return float(np.mean(vals)) if vals else None
  return value


def run_summary(runs: Sequence[RunRecord]) -> str:
  """How many declared runs are in each state; failures with kind and step."""
  counts = collections.Counter(r.state.value for r in runs)
  text = f"{len(runs)} declared runs: " + ", ".join(
      f"{n} {s}" for s, n in sorted(counts.items()))
  bad = [r for r in runs if r.state == State.FAILED]
  if bad:
    text += "\n\nFailed runs (missing from the statistics):\n\n" + "\n".join(
        f"* `{r.part}/{r.name}`: {r.kind.value if r.kind else 'failed'} at "
        f"step {r.step}" + (f" ({r.message})" if r.message else "")
        for r in bad)
  return text


def cost_summary(runs: Sequence[RunRecord]) -> str:
  """Total measured wall time and core time of the finished runs."""
  done = [r for r in runs if r.done]
  wall = sum(r.wall_s or 0.0 for r in done)
  core = sum(r.core_seconds or 0.0 for r in done)
  if not done:
    return "no finished runs"
  return (f"{len(done)} finished runs: {wall / 60:.0f} run-minutes of wall "
          f"time, {core / 60:.0f} CPU core-minutes")
