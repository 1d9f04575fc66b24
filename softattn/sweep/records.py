"""A run's result as one flat record, read from its folder; the records' CSV.

A declared run (``declaration.RunSpec``) trains in ``<workdir>/<name>`` (a
study's in ``<workdir>/<part>/<name>``). ``read_run`` reads that folder into
a ``RunRecord``: its state from ``status.json`` and the sweep runner's
``sweep_attempt.json`` (``rundir.run_state``: fields, never prose), its
metrics from ``metrics.jsonl``, the config values asked for from the
declared config (else the folder's ``config.json``). ``collect`` reads every
declared run, finished or not. ``write_csv`` / ``read_csv`` store and
restore the records, so a report can be made again from the file alone.
``sweep report`` (``softattn.sweep.report``) and the studies
(``softattn_studies``) both build on these records.

The stored columns (``COLUMNS``, then one per metric, then ``series`` and
``probes``): ``part, run, seed, overrides`` (JSON of the sweep's overrides),
``fields`` (JSON: resolved config values asked for), ``state, kind, step``
(last completed step; for ``kind=nonfinite`` the step that diverged),
``message, total_steps, batch_size, epochs`` (declared length, in epochs of
the training split), ``wall_s`` (the trainer's elapsed time summed over
attempts, ``status.json``'s ``wall_seconds``; for runs recorded before that
field, first write of ``config.json`` to the last status update, the last
attempt only), ``core_seconds, flops_per_step``; one column per metric
(``final/<eval metric>`` at the last evaluation, ``best/accuracy`` max and
``best/loss`` min over evaluations, ``final/train_loss``,
``final/train_accuracy``, ``value/<name>``); ``series`` (JSON: metric ->
``[[step, value], ...]``) and ``probes`` (JSON: checkpoint-derived data such
as attention maps).
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import fnmatch
import io
import json
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from softattn import paths, runstate
from softattn.runstate import FailureKind, State
from softattn.sweep import declaration, rundir

COLUMNS = ("part", "run", "seed", "overrides", "fields", "state", "kind",
           "step", "message", "total_steps", "batch_size", "epochs", "wall_s",
           "core_seconds", "flops_per_step")
MAX_SERIES_POINTS = 60   # per metric and run: enough for a curve


@dataclasses.dataclass
class RunRecord:
  """One declared run and what became of it.

  What was declared: ``name``, ``overrides``, ``part`` (a study's workdir
  subfolder; ``""`` for a plain sweep), ``fields`` (config values asked
  for), ``total_steps``, ``batch_size``, ``epochs`` (the declared length;
  None for a run known by name only). What its folder says: ``state``,
  ``kind``, ``step``, ``message`` (one line for people, never parsed),
  ``wall_s``, ``core_seconds``, ``flops_per_step``, ``params`` (the model's
  parameter count), ``metrics`` (``final/<m>``, ``best/<m>``, and what a
  report derives: ``value/<name>``), ``series`` (curves a plot needs),
  ``probes`` (checkpoint-derived data a study adds) and ``unparsable`` (the
  ``metrics.jsonl`` lines a crash tore). Only when read from a folder, and
  not stored in the CSV: ``records`` (``metrics.jsonl``), ``status``
  (``status.json``), ``config`` (declared, else ``config.json``), ``dir``.
  """
  name: str
  overrides: dict[str, Any]
  part: str = ""
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
  params: int | None = None
  metrics: dict[str, float] = dataclasses.field(default_factory=dict)
  series: dict[str, list] = dataclasses.field(default_factory=dict)
  probes: dict[str, Any] = dataclasses.field(default_factory=dict)
  unparsable: list[paths.Unparsable] = dataclasses.field(default_factory=list)
  records: list[dict] = dataclasses.field(default_factory=list, repr=False)
  status: runstate.Status | None = dataclasses.field(default=None,
                                                      repr=False)
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

  @property
  def train_flops(self) -> float | None:
    """FLOPs per step x steps, when both are known."""
    if _finite(self.flops_per_step) and _finite(self.step):
      return self.flops_per_step * self.step
    return None

  def get(self, field: str, default=None):
    """A setting: ``part``, an override, else the recorded config value."""
    if field == "part":
      return self.part
    if field in self.overrides:
      return self.overrides[field]
    return self.fields.get(field, default)

  def label(self, field: str) -> str:
    """The setting ``field`` as text; ``?`` when unknown."""
    v = self.get(field)
    return "?" if v is None else str(v)

  def value(self, column: str) -> float | None:
    """A numeric column (``final/accuracy``, ``value/step_ms``, ``epochs``,
    ``core_seconds``, ``train_flops``...), None when missing or not
    finite."""
    v = self.metrics.get(column) if "/" in column else getattr(
        self, column, None)
    return float(v) if _finite(v) else None

  def column(self, name: str) -> Any:
    """The value of a CSV column: ``run`` (the name), an attribute, a
    metric (a name with ``/``), else the setting ``name`` (``get``);
    ``series`` and ``probes`` are None when empty."""
    if name == "run":
      return self.name
    if name in ("series", "probes"):
      return getattr(self, name) or None
    if "/" in name:
      return self.metrics.get(name)
    if name in _ATTRIBUTES or name in ("seed", "train_flops"):
      return getattr(self, name)
    return self.get(name)

  def curve(self, metric: str, split: str = "train"
            ) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` of ``<split>/<metric>``: from the stored series,
    else from the records of a run read from its folder."""
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


_ATTRIBUTES = frozenset(f.name for f in dataclasses.fields(RunRecord))


def _finite(x) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool) and \
      math.isfinite(x)


def config_value(config, field: str):
  """The leaf ``field`` (``"model.normalizer"``) of a config or its JSON
  dict; None when absent or a subtree. Tuples come back as lists."""
  node = config
  for key in field.split("."):
    try:
      node = node[key]
    except (KeyError, IndexError, TypeError, AttributeError):
      return None
  if isinstance(node, dict) or hasattr(node, "to_dict"):
    return None
  return list(node) if isinstance(node, tuple) else node


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


def declared(spec: declaration.RunSpec, *, part: str = "",
             fields: Sequence[str] = ()) -> RunRecord:
  """The record of ``spec`` before it runs: its name, overrides, the
  ``fields`` of its config and, for a training config (one with a
  ``batch_size`` and ``data``), its declared length."""
  cfg = spec.config
  run = RunRecord(name=spec.name, overrides=dict(spec.overrides), part=part,
                  fields={f: config_value(cfg, f) for f in fields},
                  config=cfg)
  if cfg is not None and "batch_size" in cfg and "data" in cfg:
    run.total_steps, run.epochs = declared_length(cfg)
    run.batch_size = int(cfg.batch_size)
  return run


def _wall_seconds(run_dir: str) -> float | None:
  try:
    start = paths.mtime(paths.join(run_dir, rundir.CONFIG))
    end = paths.mtime(paths.join(run_dir, runstate.FILENAME))
  except OSError:
    return None
  return max(end - start, 0.0)


def _num_params(records: Sequence[dict]) -> int | None:
  """The model's parameter count, from the loop's ``info`` record."""
  for record in records:
    if record.get("split") == "info" and "num_params" in record:
      return record["num_params"]
  return None


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


def read_run(spec: declaration.RunSpec, run_dir: str, *, part: str = "",
             fields: Sequence[str] = (),
             values: Mapping[str, Callable[[RunRecord], float | None]] = {},
             series: Sequence[str] = ()) -> RunRecord:
  """The declared run ``spec`` read from ``run_dir``.

  ``fields``: config values to record (from ``spec.config``, else the
  folder's ``config.json``); ``values``: derived per-run numbers (stored as
  ``value/<name>``); ``series``: ``<split>/<metric>`` glob patterns (e.g.
  ``train/diag/*score_std``) of the curves to keep. A ``metrics.jsonl``
  line that does not parse is skipped and named in ``unparsable``.
  """
  run = declared(spec, part=part)
  run.dir = run_dir
  if run.config is None:
    run.config = rundir.read_json(paths.join(run_dir, rundir.CONFIG))
  run.fields = {f: config_value(run.config, f) for f in fields}
  state = rundir.run_state(run_dir)
  run.state, run.kind, run.message = state.state, state.kind, state.reason
  run.records, run.unparsable = paths.scan_json_lines(
      paths.join(run_dir, rundir.METRICS))
  run.params = _num_params(run.records)
  status = run.status = state.record
  if status is not None:
    run.step = status.step
    run.core_seconds = status.core_seconds
    run.flops_per_step = status.flops_per_step
    run.wall_s = status.wall_seconds or _wall_seconds(run_dir)
  if run.done:
    run.metrics.update(_eval_metrics(run.records))
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


def collect(workdir: str, specs: Iterable[declaration.RunSpec], *,
            part: str = "", **kw) -> list[RunRecord]:
  """The records of the declared runs ``specs``, each read from
  ``<workdir>/<name>`` (``<workdir>/<part>/<name>`` when ``part`` is
  given); ``kw`` as ``read_run``."""
  folder = paths.join(workdir, part) if part else workdir
  return [read_run(s, paths.join(folder, s.name), part=part, **kw)
          for s in specs]


def columns(runs: Sequence[RunRecord]) -> list[str]:
  """The stored columns: ``COLUMNS``, each metric of any run (sorted), then
  ``series`` and ``probes``."""
  metric_cols = sorted({k for r in runs for k in r.metrics})
  return [*COLUMNS, *metric_cols, "series", "probes"]


def cell(value: Any) -> str:
  """A value as CSV text: ``""`` for None, an enum's value, a dict as
  sorted JSON, anything else ``str``."""
  if value is None:
    return ""
  if isinstance(value, enum.Enum):
    return value.value
  if isinstance(value, dict):
    return json.dumps(value, sort_keys=True)
  return str(value)


Column = str | Callable[[RunRecord], Any]


def column_value(run: RunRecord, col: Column) -> Any:
  """``col(run)`` for a function (e.g. ``operator.methodcaller("get",
  field)`` for a setting whose name is also an attribute's), else
  ``run.column(col)``."""
  return col(run) if callable(col) else run.column(col)


def write_csv(path: str, runs: Sequence[RunRecord],
              cols: Sequence[Column] | None = None,
              header: Sequence[str] | None = None) -> str:
  """Writes one row per record to ``path`` (local, parents made, or
  ``gs://``): the ``cols`` (see ``column_value``; default ``columns(runs)``,
  what ``read_csv`` reads back) under ``header`` (default the column names,
  needed when a column is a function; a report's table may rename them)."""
  cols = columns(runs) if cols is None else list(cols)
  header = cols if header is None else list(header)
  f = io.StringIO(newline="")
  w = csv.writer(f)
  w.writerow(header)
  for r in runs:
    cells = [cell(column_value(r, c)) for c in cols]
    # read_csv's csv module refuses longer fields: fail here, where the
    # run and column are known, not when the file is next read.
    n, col = max(zip(map(len, cells), header))
    if n > csv.field_size_limit():
      raise ValueError(f"run {r.name} (part {r.part}): its {col} cell is "
                       f"{n:,} characters, over the csv limit of "
                       f"{csv.field_size_limit():,}; store less (e.g. a "
                       "probe on fewer runs, or a smaller array)")
    w.writerow(cells)
  paths.write_atomic(path, f.getvalue())
  return path


def _num(text: str, kind=float):
  return None if text == "" else kind(float(text)) if kind is int else \
      kind(text)


def read_csv(path: str) -> list[RunRecord]:
  """The records ``write_csv`` wrote with the default columns (no
  ``records``, ``status``, ``config``, ``params`` or ``unparsable``)."""
  out = []
  text = paths.read_text(path)
  if text is None:
    raise FileNotFoundError(path)
  for row in csv.DictReader(io.StringIO(text, newline="")):
    metrics = {k: float(v) for k, v in row.items()
               if "/" in k and v not in ("", None)}
    out.append(RunRecord(
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
