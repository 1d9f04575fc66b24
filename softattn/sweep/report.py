"""Collects a sweep's runs into one table, fits and plots error vs compute.

``report(sweep_dir)`` reads every run directory (the runs named in
``sweep.json``, or every sub-directory that looks like a run) into a
``records.RunRecord`` and writes:

* ``results.csv`` / ``results.md``: one row per run: its swept fields, state
  (``runstate.State``: ``done``, ``failed`` with its ``kind``, ``preempted``,
  ``running``, ``not_started``) with the reason,
  steps, FLOPs per step (XLA's cost analysis of the jitted train step, from
  ``status.json``), training FLOPs = FLOPs per step x steps, measured
  core-seconds (process CPU time), the final eval metric and error = 1 - metric.
  Runs that did not finish are rows too, never dropped.
* ``fits.json`` and a fits table in ``results.md``: per group (normalizer by
  default) the saturating power law ``err(C) = a + b C^-c`` of
  ``softattn.sweep.fit`` with one-sigma uncertainties, or why there is none.
* ``scaling.png``: error against compute, log x-axis, one colour per group,
  points and fitted curve.

A ``metrics.jsonl`` line that does not parse (a write torn by a crash) is
skipped and named, run, file and line, under the tables of ``results.md``
and by ``sweep report``.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

from softattn import paths, runstate
from softattn.sweep import fit as fit_lib
from softattn.sweep import declaration, records, rundir

COMPUTE_AXES = {
    "flops": ("train_flops", "training compute (FLOPs = XLA FLOPs/step x steps)"),
    "core_seconds": ("core_seconds", "training compute (measured core-seconds)"),
}


def find_metric(record: dict, metric: str) -> tuple[str, Any] | None:
  """``(key, value)`` of ``metric`` in ``record``.

  The exact key, else the eval spellings of the training loop (``eval_<m>`` in
  ``status.json``'s ``final``, ``eval/<m>`` in ``metrics.jsonl``). Train-set
  metrics never stand in for eval ones.
  """
  for key in (metric, "eval_" + metric, "eval/" + metric):
    if key in record:
      return key, record[key]
  return None


def final_metric(run_dir: str, record: runstate.Status | None, metric: str,
                 records: Sequence[dict] | None = None
                 ) -> tuple[Any, str | None]:
  """The run's final ``metric``: ``status.json``'s ``final``, else the last
  eval record of ``metrics.jsonl`` (``records`` when already read). Returns
  ``(value, problem)``."""
  final = (record.final if record is not None else None) or {}
  hit = find_metric(final, metric)
  if hit is None:
    if records is None:
      records = rundir.read_metrics(run_dir)
    for record in reversed(records):
      if record.get("split") == "eval":
        hit = find_metric(record, metric)
        if hit is not None:
          break
  if hit is None:
    have = sorted(final) or "none"
    return None, f"no {metric!r} among the final metrics ({have})"
  return hit[1], None


def _short_names(fields: Sequence[str]) -> dict[str, str]:
  last = [f.rsplit(".", 1)[-1] for f in fields]
  return {f: (s if last.count(s) == 1 else f) for f, s in zip(fields, last)}


def read_sweep(sweep_dir: str, *, metric: str = "accuracy",
               group_by: str = "model.normalizer", spec: str | None = None
               ) -> tuple[list[records.RunRecord], list[str]]:
  """The record of each run of the sweep in ``sweep_dir``
  (``records.collect``), and the swept fields.

  The runs are those of ``spec`` (a sweep config, e.g. for a sweep launched on
  TPU VMs and copied back, which has no ``sweep.json``), else those recorded in
  ``sweep.json`` by ``sweep run``, else every sub-directory that looks like a
  run (its swept fields then unknown). Each record holds the swept fields and
  ``group_by`` as settings, its final ``metric`` as ``final/<metric>`` and
  ``value/error`` = 1 - metric; a run that finished without a finite final
  metric is ``failed``.
  """
  manifest = rundir.read_json(paths.join(sweep_dir, rundir.MANIFEST))
  if spec is not None:
    specs = declaration.load(spec).runs
  elif manifest is not None:
    specs = [declaration.RunSpec(r["name"], r.get("overrides", {}), None)
             for r in manifest["runs"]]
  else:
    known = (rundir.STATUS, rundir.METRICS, rundir.CONFIG, rundir.ATTEMPT)
    specs = [declaration.RunSpec(d, {}, None) for d in paths.listdir(sweep_dir)
             if any(paths.exists(paths.join(sweep_dir, d, k)) for k in known)]
  if not specs:
    raise FileNotFoundError(
        f"{sweep_dir!r} holds no sweep.json and no run directories; pass the "
        "--workdir given to `sweep run`.")
  fields: list[str] = []
  for s in specs:
    fields.extend(f for f in s.overrides if f not in fields)

  # Lines a crash tore are named in results.md (``unparsable``), not dropped.
  runs = records.collect(sweep_dir, specs,
                         fields=list(dict.fromkeys([*fields, group_by])))
  for run in runs:
    if run.state != runstate.State.DONE:
      continue
    value, problem = final_metric(run.dir, run.status, metric, run.records)
    kind = runstate.FailureKind.ERROR
    if problem is None and not rundir.is_finite_number(value):
      problem, kind = f"final {metric} is {value}", runstate.FailureKind.NONFINITE
    if problem is not None:
      run.state, run.kind, run.message = runstate.State.FAILED, kind, problem
      run.metrics.pop(f"final/{metric}", None)
    else:
      run.metrics[f"final/{metric}"] = float(value)
      run.metrics["value/error"] = 1.0 - float(value)
  return runs, fields


def fit_groups(runs: Sequence[records.RunRecord], compute: str = "flops",
               group_by: str = "model.normalizer") -> dict[str, dict]:
  """Per group (the runs' ``group_by`` setting): the power-law fit of error
  vs compute, or why there is none."""
  key = COMPUTE_AXES[compute][0]
  groups: dict[str, list[tuple[float, float]]] = {}
  for run in runs:
    points = groups.setdefault(run.label(group_by), [])
    c, err = run.value(key), run.value("value/error")
    if run.done and err is not None and c is not None and c > 0:
      points.append((c, err))
  out = {}
  for group, points in groups.items():
    try:
      f = fit_lib.fit_power_law([c for c, _ in points],
                                [e for _, e in points])
    except fit_lib.FitError as e:
      out[group] = {"n": len(points), "fit": None, "reason": str(e)}
      continue
    out[group] = {"n": len(points), "fit": f, "reason": None}
  return out


def _fmt(value: Any) -> str:
  if value is None:
    return ""
  if isinstance(value, float):
    if math.isnan(value) or math.isinf(value):
      return str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
      return f"{value:.3e}"
    return f"{value:.4g}"
  return str(value)


def _columns(fields: Sequence[str], metric: str
             ) -> tuple[list[records.Column], list[str]]:
  """The table's record columns and their headers."""
  cols = ["run", *[operator.methodcaller("get", f) for f in fields],
          "state", "kind", "params", "step", "flops_per_step", "train_flops",
          "core_seconds", f"final/{metric}", "value/error", "message"]
  header = ["run", *fields, "state", "kind", "params", "steps",
            "flops_per_step", "train_flops", "core_seconds", metric, "error",
            "reason"]
  return cols, header


def markdown(runs: Sequence[records.RunRecord], fields: Sequence[str],
             fits: dict, *, metric: str, compute: str, title: str) -> str:
  """The runs table and the fits table as GitHub markdown."""
  short = _short_names(fields)
  columns, header = _columns(fields, metric)
  header = [short.get(c, c) for c in header]
  lines = [f"# {title}", "",
           "| " + " | ".join(header) + " |",
           "|" + "---|" * len(header)]
  for run in runs:
    cells = [_fmt(records.column_value(run, c)).replace("|", "\\|")
             .replace("<", "&lt;") for c in columns]
    lines.append("| " + " | ".join(cells) + " |")
  counts = {}
  for run in runs:
    counts[run.state.value] = counts.get(run.state.value, 0) + 1
  lines += ["", "Runs: " + ", ".join(f"{n} {s}" for s, n in sorted(
      counts.items())) + ". `train_flops` = XLA cost-analysis FLOPs of one "
            "jitted train step x steps; `core_seconds` = process CPU time.",
            "", f"## Fits: error = a + b·C^-c, C = {COMPUTE_AXES[compute][1]}",
            "", "One standard deviation from curve_fit's covariance (scaled by "
            "the residual variance). b is also given at the reference compute "
            "C0 (geometric mean of the points): b·C0^-c = err(C0) - a.", "",
            "| group | points | a | c | b | b·C0^-c | C0 | rms | note |",
            "|---|---|---|---|---|---|---|---|---|"]
  for group, res in fits.items():
    f = res["fit"]
    if f is None:
      reason = res["reason"].replace("|", "\\|").replace("<", "&lt;")
      lines.append(f"| {group} | {res['n']} |  |  |  |  |  |  | {reason} |")
      continue
    lines.append(
        f"| {group} | {f.n} | {f.a:.4g} ± {f.a_std:.2g} | "
        f"{f.c:.3g} ± {f.c_std:.2g} | {f.b:.3g} ± {f.b_std:.2g} | "
        f"{f.b0:.3g} ± {f.b0_std:.2g} | {f.c0:.3g} | {f.rms:.2g} |  |")
  torn = unparsable(runs)
  if torn:
    lines += ["", "## Unreadable metrics lines", "",
              "Skipped, so a run's final metric or parameter count may come "
              "from an earlier record:", ""]
    lines += [f"- {run}: {paths.describe_unparsable(bad)}"
              for run, bad in torn.items()]
  return "\n".join(lines) + "\n"


def unparsable(runs: Sequence[records.RunRecord]
               ) -> dict[str, list[paths.Unparsable]]:
  """Per run, the ``metrics.jsonl`` lines that did not parse (runs with any)."""
  return {run.name: run.unparsable for run in runs if run.unparsable}


def report(sweep_dir: str, *, out_dir: str | None = None,
           metric: str = "accuracy", group_by: str = "model.normalizer",
           compute: str = "flops", plot: bool = True,
           spec: str | None = None) -> dict:
  """Writes ``results.csv``, ``results.md``, ``fits.json``, ``scaling.png``.

  Args:
    sweep_dir: the ``--workdir`` of ``sweep run``.
    out_dir: where the outputs go (default ``sweep_dir``).
    metric: the final eval metric (error = 1 - metric).
    group_by: the config field that makes one curve per value.
    compute: ``flops`` or ``core_seconds`` for the x-axis and fits.
    plot: also draw ``scaling.png``.
    spec: the sweep config that names the runs (default: ``sweep.json``).

  Returns:
    ``{"runs": [RunRecord, ...], "fits": {...}, "files": [...],
    "unparsable": {run:
    [paths.Unparsable, ...]}}`` (the last for runs whose ``metrics.jsonl``
    has lines that did not parse, also listed in ``results.md``).
  """
  if compute not in COMPUTE_AXES:
    raise ValueError(f"compute={compute!r}; valid: {sorted(COMPUTE_AXES)}.")
  out_dir = out_dir or sweep_dir
  paths.makedirs(out_dir)
  runs, fields = read_sweep(sweep_dir, metric=metric, group_by=group_by,
                            spec=spec)
  fits = fit_groups(runs, compute, group_by)
  files = [paths.join(out_dir, n) for n in
           ("results.csv", "results.md", "fits.json")]
  records.write_csv(files[0], runs, *_columns(fields, metric))
  paths.write_atomic(files[1], markdown(
      runs, fields, fits, metric=metric, compute=compute,
      title=f"Sweep {paths.path(sweep_dir).name}: 1 - {metric} vs compute "
      f"by {group_by}"))
  fits_json = {
      g: {"n": r["n"], "reason": r["reason"],
          "fit": None if r["fit"] is None else {
              k: v for k, v in vars(r["fit"]).items()}}
      for g, r in fits.items()}
  paths.write_json(files[2], {"compute": compute, "metric": metric,
                              "group_by": group_by, "fits": fits_json})
  if plot:
    from softattn.sweep import plot as plot_lib  # pylint: disable=g-import-not-at-top
    png = paths.join(out_dir, "scaling.png")
    plot_lib.plot_scaling(runs, fits, png, group_by=group_by,
                          compute_key=COMPUTE_AXES[compute][0],
                          xlabel=COMPUTE_AXES[compute][1],
                          ylabel=f"error = 1 - {metric}", title=group_by)
    files.append(png)
  return {"runs": runs, "fits": fits, "files": files,
          "unparsable": unparsable(runs)}
