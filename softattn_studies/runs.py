"""A study's runs as flat per-run records, and ``runs.csv`` that holds them.

A study's runs live in ``<workdir>/<part>/<run name>`` (one sweep
declaration per part, see ``softattn.sweep``). ``collect`` reads every
declared run, finished or not, into a ``Run``: its overrides, its state from
``status.json`` (``softattn.runstate``: state, failure kind, step; fields,
never prose), the declared budget, final and best eval metrics, the study's
derived values (``value/<name>``) and the series its plots need. ``write_csv``
/ ``read_csv`` store and restore exactly those records, so a report can be
regenerated from ``runs.csv`` alone (``report.py --from-csv``).

``runs.csv`` columns: ``part, run, seed, overrides`` (JSON of the sweep's
overrides), ``fields`` (JSON: resolved config values the study selects on),
``state, kind, step`` (last completed step; for ``kind=nonfinite`` the step
that diverged), ``message, total_steps, batch_size, epochs`` (declared
length, in epochs of the training split), ``wall_s`` (the trainer's
elapsed time summed over attempts, ``status.json``'s ``wall_seconds``; for
runs recorded before that field, first write of ``config.json`` to the last
status update, the last attempt only), ``core_seconds, flops_per_step``;
one column per metric (``final/<eval metric>`` at the last evaluation,
``best/accuracy`` max and ``best/loss`` min over evaluations,
``final/train_loss``, ``final/train_accuracy``, ``value/<name>``);
``series`` (JSON: metric -> ``[[step, value], ...]``) and ``probes``
(JSON: checkpoint-derived data such as attention maps).
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import fnmatch
import json
import io
import math
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from softattn import paths, runstate
from softattn.runstate import FailureKind, State
from softattn.sweep import declaration, rundir

FIXED = ("part", "run", "seed", "overrides", "fields", "state", "kind", "step",
         "message", "total_steps", "batch_size", "epochs", "wall_s",
         "core_seconds", "flops_per_step")
JSON_COLUMNS = ("overrides", "fields", "series", "probes")
MAX_SERIES_POINTS = 60   # per metric and run: enough for a curve


@dataclasses.dataclass
class Run:
  """One declared run of a study, as ``runs.csv`` records it."""
  part: str
  name: str
  overrides: dict[str, Any]
  fields: dict[str, Any] = dataclasses.field(default_factory=dict)
  state: State = State.NOT_STARTED
  kind: FailureKind | None = None
  step: int | None = None
  message: str | None = None
  total_steps: int | None = None
  batch_size: int | None = None
  epochs: float | None = None
  wall_s: float | None = None
  core_seconds: float | None = None
  flops_per_step: float | None = None
  metrics: dict[str, float] = dataclasses.field(default_factory=dict)
  series: dict[str, list] = dataclasses.field(default_factory=dict)
  probes: dict[str, Any] = dataclasses.field(default_factory=dict)
  # Only when read from a workdir (not stored in runs.csv):
  records: list[dict] = dataclasses.field(default_factory=list, repr=False)
  config: Any = dataclasses.field(default=None, repr=False)
  dir: str | None = dataclasses.field(default=None, repr=False)

  @property
  def seed(self) -> int:
    return int(self.overrides.get("seed", self.fields.get("seed", 0)))

  @property
  def done(self) -> bool:
    return self.state == State.DONE

  @property
  def diverged(self) -> bool:
    """Stopped on a NaN/Inf loss or gradient (``kind == nonfinite``)."""
    return self.state == State.FAILED and self.kind == FailureKind.NONFINITE

  def get(self, field: str, default=None):
    """A setting: ``part``, an override, else the recorded config value."""
    if field == "part":
      return self.part
    if field in self.overrides:
      return self.overrides[field]
    return self.fields.get(field, default)

  def value(self, column: str) -> float | None:
    """A numeric column (``final/accuracy``, ``value/step_ms``, ``epochs``,
    ``core_seconds``...), None when missing or not finite."""
    v = self.metrics.get(column) if "/" in column else getattr(
        self, column, None)
    return float(v) if _finite(v) else None

  def curve(self, metric: str, split: str = "train"
            ) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` of ``<split>/<metric>``: from the stored series,
    else from the records of a run read from its workdir."""
    key = f"{split}/{metric}"
    if key in self.series:
      pts = self.series[key]
    else:
      pts = [(r["step"], r[metric]) for r in self.records
             if r.get("split") == split and _finite(r.get(metric))]
    if not pts:
      return np.zeros(0), np.zeros(0)
    s, v = zip(*pts)
    return np.asarray(s, float), np.asarray(v, float)

  def keys(self, prefix: str = "", suffix: str = "",
           split: str = "train") -> list[str]:
    """Sorted metric names of ``split`` (stored series or records) between
    ``prefix`` and ``suffix``, e.g. the ``diag/<layer>/score_std`` keys."""
    names = {k.split("/", 1)[1] for k in self.series
             if k.startswith(split + "/")}
    names |= {k for r in self.records if r.get("split") == split for k in r}
    return sorted(k for k in names if k.startswith(prefix)
                  and k.endswith(suffix) and k not in ("step", "split"))


def _finite(x) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool) and \
      math.isfinite(x)


def select(runs: Iterable[Run], where: Mapping[str, Any]) -> list[Run]:
  """Runs whose settings equal ``where`` (``{"part": "models",
  "model.variant": "B"}``); a tuple value matches any of its items."""
  match = lambda got, v: got in v if isinstance(v, tuple) else got == v
  return [r for r in runs if all(match(r.get(k), v)
                                 for k, v in where.items())]


def declared_length(config) -> tuple[int | None, float | None]:
  """``(total_steps, epochs)`` a config declares (either may be given);
  epochs count examples of the config's training split, for a dataset
  ``softattn.data.datasets.KNOWN`` holds (None otherwise)."""
  n = _train_size(config.data)
  b = int(config.batch_size)
  steps = config.get("total_steps")
  if steps:
    return int(steps), (steps * b / n if n else None)
  ep = config.get("num_epochs")
  if ep and n:
    return int(math.ceil(ep * n / b)), float(ep)
  return None, (float(ep) if ep else None)


def _train_size(data_config) -> int | None:
  from softattn.data import datasets  # pylint: disable=g-import-not-at-top
  known = datasets.KNOWN.get(data_config.name)
  if known is None:
    return None
  split = data_config.get("train_split") or known.train_split
  return datasets.split_size(data_config.name, split)


def _config_value(config, field: str):
  node = config
  for part in field.split("."):
    if node is None or part not in node:
      return None
    node = node[part]
  if hasattr(node, "to_dict"):
    return None
  return list(node) if isinstance(node, tuple) else node


def _wall_seconds(run_dir: str) -> float | None:
  try:
    start = paths.mtime(paths.join(run_dir, rundir.CONFIG))
    end = paths.mtime(paths.join(run_dir, runstate.FILENAME))
  except OSError:
    return None
  return max(end - start, 0.0)


def _eval_metrics(records: list[dict]) -> dict[str, float]:
  evals = [r for r in records if r.get("split") == "eval"]
  out = {}
  if evals:
    out.update({f"final/{k}": float(v) for k, v in evals[-1].items()
                if k not in ("step", "split") and _finite(v)})
    for k, best in (("accuracy", max), ("loss", min)):
      vals = [r[k] for r in evals if _finite(r.get(k))]
      if vals:
        out[f"best/{k}"] = float(best(vals))
  train = [r for r in records if r.get("split") == "train"]
  for k in ("loss", "accuracy"):
    vals = [r[k] for r in train if _finite(r.get(k))]
    if vals:
      out[f"final/train_{k}"] = float(vals[-1])
  return out


def _decimate(pts: list, n: int = MAX_SERIES_POINTS) -> list:
  if len(pts) <= n:
    return pts
  idx = np.unique(np.linspace(0, len(pts) - 1, n).round().astype(int))
  return [pts[i] for i in idx]


def read_run(part: str, declared, run_dir: str, *, fields: Sequence[str] = (),
             values: Mapping[str, Callable[[Run], float | None]] = {},
             series: Sequence[str] = ()) -> Run:
  """One declared run (``declaration.Run``) read from ``run_dir``.

  ``values``: the study's derived per-run numbers (stored as
  ``value/<name>``); ``series``: ``<split>/<metric>`` glob patterns (e.g.
  ``train/diag/*score_std``) of the curves the plots need.
  """
  cfg = declared.config
  steps, epochs = declared_length(cfg)
  status = runstate.read(run_dir)
  records = rundir.read_metrics(run_dir)
  run = Run(part=part, name=declared.name, overrides=dict(declared.overrides),
            fields={f: _config_value(cfg, f) for f in fields},
            total_steps=steps, batch_size=int(cfg.batch_size), epochs=epochs,
            records=records, config=cfg, dir=run_dir)
  if status is not None:
    run.state, run.kind = State(status.state), status.kind
    run.step, run.message = status.step, status.message
    run.core_seconds = status.core_seconds or None
    run.flops_per_step = status.flops_per_step
    run.wall_s = status.wall_seconds or _wall_seconds(run_dir)
  if run.done:
    run.metrics.update(_eval_metrics(records))
  for name, fn in values.items():
    v = fn(run)
    if v is not None:
      run.metrics[f"value/{name}"] = float(v)
  for pattern in series:
    split, _, metric = pattern.partition("/")
    for m in fnmatch.filter(run.keys(split=split), metric):
      s, v = run.curve(m, split)
      if s.size:
        run.series[f"{split}/{m}"] = _decimate(
            [[int(a), float(b)] for a, b in zip(s, v)])
  return run


def collect(parts: Mapping[str, str], spec: str, workdir: str, *,
            extra: Sequence[str] = (), **kw) -> list[Run]:
  """Every run the study declares: ``parts`` maps a workdir subfolder to its
  sweep args (``""``: the sweep file's defaults); ``kw`` as ``read_run``."""
  out = []
  for part, args in parts.items():
    sweep = declaration.load(f"{spec}:{args}" if args else spec, extra=extra)
    out += [read_run(part, r, paths.join(workdir, part, r.name), **kw)
            for r in sweep.runs]
  return out


def merge(runs: Sequence[Run], kept: Sequence[Run]) -> list[Run]:
  """``runs`` with each run that has not started taken from ``kept`` (a
  committed ``runs.csv``) where that has the same part and name: a study
  resumed on a machine without its old workdir adds runs to the committed
  ones. Only declared runs are kept; a run started in the workdir wins."""
  old = {(r.part, r.name): r for r in kept
         if r.state != State.NOT_STARTED}
  return [old.get((r.part, r.name), r) if r.state == State.NOT_STARTED
          else r for r in runs]


def _cell(v) -> str:
  if v is None:
    return ""
  return v.value if isinstance(v, (State, FailureKind)) else str(v)


def write_csv(path: str, runs: Sequence[Run]) -> str:
  """Writes the runs' records (one row per declared run) to ``path``."""
  metric_cols = sorted({k for r in runs for k in r.metrics})
  f = io.StringIO(newline="")
  w = csv.writer(f)
  header = [*FIXED, *metric_cols, "series", "probes"]
  w.writerow(header)
  for r in runs:
    row = [r.name if k == "run" else getattr(r, k) for k in FIXED]
    cells = [json.dumps(v, sort_keys=True) if k in JSON_COLUMNS
             else _cell(v) for k, v in zip(FIXED, row)]
    cells += [_cell(r.metrics.get(k)) for k in metric_cols]
    cells += [json.dumps(x, sort_keys=True) if x else ""
              for x in (r.series, r.probes)]
    # read_csv's csv module refuses longer fields: fail here, where the
    # run and column are known, not when the file is next read.
    n, col = max(zip(map(len, cells), header))
    if n > csv.field_size_limit():
      raise ValueError(f"run {r.name} (part {r.part}): its {col} cell is "
                       f"{n:,} characters, over the csv limit of "
                       f"{csv.field_size_limit():,}; store less (e.g. a "
                       "probe on fewer runs, or a smaller array)")
    w.writerow(cells)
  paths.write_atomic(path, f.getvalue())  # local (parents made) or gs://
  return path


def _num(text: str, kind=float):
  return None if text == "" else kind(float(text)) if kind is int else \
      kind(text)


def read_csv(path: str) -> list[Run]:
  """The runs ``write_csv`` wrote, as ``Run`` records (no config, records)."""
  out = []
  text = paths.read_text(path)
  if text is None:
    raise FileNotFoundError(path)
  for row in csv.DictReader(io.StringIO(text, newline="")):
    metrics = {k: float(v) for k, v in row.items()
               if "/" in k and v not in ("", None)}
    out.append(Run(
        part=row["part"], name=row["run"],
        overrides=json.loads(row["overrides"] or "{}"),
        fields=json.loads(row["fields"] or "{}"),
        state=State(row["state"]),
        kind=FailureKind(row["kind"]) if row["kind"] else None,
        message=row["message"] or None, metrics=metrics,
        **{k: _num(row[k], int) for k in ("step", "total_steps",
                                          "batch_size")},
        **{k: _num(row[k]) for k in ("epochs", "wall_s", "core_seconds",
                                     "flops_per_step")},
        series=json.loads(row["series"]) if row["series"] else {},
        probes=json.loads(row["probes"]) if row["probes"] else {}))
  return out


def median_train(metric: str, skip_first: int = 1):
  """A ``values`` entry: median of a train metric over the logged steps,
  skipping the first ``skip_first`` (compilation), for finished runs."""
  def fn(run: Run) -> float | None:
    if not run.done:
      return None
    _, v = run.curve(metric)
    v = v[skip_first:] if v.size > skip_first else v
    return float(np.median(v)) if v.size else None
  return fn


def step_ms(run: Run) -> float | None:
  """A ``values`` entry: the median train step in ms (from the logged
  ``steps_per_sec``, compilation skipped), for finished runs."""
  sps = median_train("steps_per_sec")(run)
  return 1000.0 / sps if sps else None


def diverged_or_below(column: str, threshold):
  """A ``values`` entry, 1 or 0: whether the run diverged or ended with
  ``column`` (e.g. ``final/accuracy``) below ``threshold``, a number or a
  function of the run (e.g. twice chance on its dataset): what a
  "collapses" or "breaks down" claim counts. None without either."""
  def fn(run: Run) -> float | None:
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


def layer_curves(run: Run, metric: str, min_points: int = 1
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
  def value(run: Run) -> float | None:
    vals = [x for v in layer_curves(run, metric, min_points)
            if (x := fn(v)) is not None]
    return float(np.mean(vals)) if vals else None
  return value


def run_summary(runs: Sequence[Run]) -> str:
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


def cost_summary(runs: Sequence[Run]) -> str:
  """Total measured wall time and core time of the finished runs."""
  done = [r for r in runs if r.done]
  wall = sum(r.wall_s or 0.0 for r in done)
  core = sum(r.core_seconds or 0.0 for r in done)
  if not done:
    return "no finished runs"
  return (f"{len(done)} finished runs: {wall / 60:.0f} run-minutes of wall "
          f"time, {core / 60:.0f} CPU core-minutes")
