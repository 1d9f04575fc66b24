"""A study as a declaration, and the command line every ``report.py`` shares.

``experiments/<study>/report.py`` declares one ``Study``: the sweep parts
(workdir subfolder -> sweep args; ``focus`` for the runs that spend extra
CPU on claims more seeds or a longer budget can settle), what each run
record (``softattn.sweep.records.RunRecord``) keeps (``fields``,
``values``, ``series``, checkpoint ``probe``),
the claims, and what RESULTS.md shows: a hand-written ``template``
(``softattn_studies.template``) with the ``tables`` (``render.Table``),
``plots`` (``plotspec.Plot``) and ``facts`` it names. Then

  python experiments/<study>/report.py --workdir=workdirs/<study>
      # reads the runs, writes <out>/runs.csv, renders from that file
  python experiments/<study>/report.py --from-csv experiments/<study>/runs.csv
      # RESULTS.md and every plot from runs.csv alone

Rendering always goes through ``runs.csv``, so a report made from workdirs
and one regenerated from the committed file are the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any, Callable, Mapping, Sequence

from softattn import paths
from softattn.sweep import declaration, records
from softattn.sweep.records import RunRecord
from softattn_studies import claims as claims_lib
from softattn_studies import plotspec, render, runs as runs_lib, template
from softattn_studies import summary
from softattn_studies.discover import studies_in  # noqa: F401 (re-exported)
from softattn_studies.claims import Claim, Verdict


@dataclasses.dataclass
class Study:
  """Everything a study's report needs, declared once."""
  name: str
  title: str
  paper: str
  spec: str
  parts: Mapping[str, str]
  claims: Sequence[Claim]
  focus: Mapping[str, str] = dataclasses.field(default_factory=dict)
  optional: Mapping[str, str] = dataclasses.field(default_factory=dict)
  fields: Sequence[str] = ()
  values: Mapping[str, Callable[[RunRecord], float | None]] = \
      dataclasses.field(default_factory=dict)
  series: Sequence[str] = ()
  probe: Callable[[Sequence[RunRecord], str], None] | None = None
  # The hand-written RESULTS.md template (default: RESULTS.md.tmpl beside
  # ``spec``), the tables, plots and facts it names.
  template: str = ""
  tables: Mapping[str, render.Table] = dataclasses.field(default_factory=dict)
  plots: Mapping[str, plotspec.Plot] = dataclasses.field(default_factory=dict)
  # Named selections the template's budget placeholders read (``@NAME``).
  selections: Mapping[str, Mapping[str, Any]] = \
      dataclasses.field(default_factory=dict)
  # A fact: see ``{{fact:NAME}}`` in softattn_studies.template.
  facts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  # Claims that restate one phenomenon (its name -> their ids): counted
  # apart in the Summary line and the README, as one piece of evidence
  # each (softattn_studies.summary).
  phenomena: Mapping[str, Sequence[str]] = \
      dataclasses.field(default_factory=dict)

  def __post_init__(self):
    self.template = self.template or os.path.abspath(os.path.join(
        os.path.dirname(self.spec), "RESULTS.md.tmpl"))
    ids = {c.id for c in self.claims}
    unknown = sorted(i for g in self.phenomena.values() for i in g
                     if i not in ids)
    if unknown:
      raise ValueError(f"study {self.name}: phenomena name unknown claims "
                       f"{unknown}; valid ids are the study's claims")

  def all_parts(self) -> dict[str, str]:
    """Every part the report reads (``optional`` ones run only on request,
    e.g. the element-wise control's 70 CPU-minutes)."""
    return {**self.parts, **self.optional, **self.focus}

  @property
  def csv_name(self) -> str:
    return "runs.csv"


def _with_scale(args: str, scale: str) -> str:
  if scale == "reduced":
    return args
  return f"{args},scale={scale}" if args else f"scale={scale}"


def export(study: Study, workdir: str, csv_path: str, *, extra=(),
           scale: str = "reduced", probe: bool = True,
           cache_dir: str | None = None,
           merge_csv: str | None = None) -> list[RunRecord]:
  """Reads every declared run from ``workdir``, runs the study's checkpoint
  probe (``probe=False`` skips it) and writes ``csv_path``. ``merge_csv``:
  runs the workdir has not started are taken from that file
  (``runs.merge``), with the probe values it recorded."""
  runs = []
  for part, args in study.all_parts().items():
    args = _with_scale(args, scale)
    sweep = declaration.load(f"{study.spec}:{args}" if args else study.spec,
                             extra=extra)
    runs += records.collect(workdir, sweep.runs, part=part,
                            fields=study.fields, values=study.values,
                            series=study.series)
  if probe and study.probe is not None:
    study.probe(runs, cache_dir or os.path.dirname(csv_path) or ".")
  if merge_csv:
    runs = runs_lib.merge(runs, records.read_csv(merge_csv))
  records.write_csv(csv_path, runs)
  return runs


def verdicts(study: Study, runs: Sequence[RunRecord]) -> dict[str, Verdict]:
  return claims_lib.judge_all(study.claims, runs)


def _fact(fact, runs: Sequence[RunRecord], ver: Mapping[str, Verdict]) -> str:
  if callable(fact) and not hasattr(fact, "text"):
    return fact(runs, ver)
  return render.as_text(fact, runs)


def report(study: Study, csv_path: str, out: str, *,
           check: bool = True) -> list[str]:
  """RESULTS.md and the plots in ``out``, from ``csv_path`` alone
  (``check=False``: the template's expectations are not checked)."""
  runs = records.read_csv(csv_path)
  ver = verdicts(study, runs)
  counts, notes = summary.of_study(study, runs, ver, os.path.dirname(csv_path))
  paths.makedirs(out)
  rel = f"experiments/{study.name}/{study.csv_name}"
  command = f"python experiments/{study.name}/report.py --from-csv {rel}"
  # out/<name>.png per plot; None (no file) when it has no data yet.
  colors = plotspec.palette(list(study.plots.values()))
  files = {k: plotspec.draw(p, paths.join(out, f"{k}.png"), runs,
                            study.claims, colors)
           for k, p in study.plots.items()}
  path = template.write_results(
      paths.join(out, "RESULTS.md"), study.template, data=rel,
      command=command, runs=runs, claims=study.claims, verdicts=ver,
      tables=study.tables, images={
          k: render.image(f, study.plots[k].title) for k, f in files.items()},
      facts={k: _fact(f, runs, ver) for k, f in study.facts.items()},
      check=check,
      selections=study.selections,
      summary=summary.line(counts), notes=notes)
  return [path] + [f for f in files.values() if f]


def main(study: Study, argv=None) -> int:
  """The command line of every ``report.py`` (see the module docstring)."""
  here = f"experiments/{study.name}"
  p = argparse.ArgumentParser(description=study.title)
  src = p.add_mutually_exclusive_group()
  src.add_argument("--workdir", help="read the runs from here (default "
                   f"workdirs/{study.name}) and write <out>/runs.csv")
  src.add_argument("--from-csv", dest="from_csv",
                   help="regenerate from this runs.csv alone")
  src.add_argument("--print-parts", dest="print_parts",
                   choices=("all", "base", "focus", "optional"),
                   help="print the DIR@ARGS parts run_study.sh runs")
  p.add_argument("--out", default=here)
  p.add_argument("--set", action="append", default=[],
                 help="the same --set the runs were made with")
  p.add_argument("--scale", default="reduced",
                 help="which scale's runs the workdir holds")
  p.add_argument("--no_probes", action="store_true",
                 help="skip the checkpoint probes when exporting")
  p.add_argument("--unchecked", action="store_true",
                 help="do not check the template's expectations (a report "
                 "from synthetic runs, which the prose does not describe)")
  p.add_argument("--merge-csv", dest="merge_csv",
                 help="with --workdir: take the runs the workdir has not "
                 "started from this runs.csv (e.g. the committed one, to "
                 "add runs on a machine without the old workdir)")
  a = p.parse_args(argv)
  if a.print_parts:
    parts = {"all": {**study.parts, **study.focus}, "base": study.parts,
             "focus": study.focus, "optional": study.optional
             }[a.print_parts]
    print(" ".join(f"{d}@{_with_scale(args, a.scale)}"
                   for d, args in parts.items()))
    return 0
  if a.from_csv:
    csv_path = a.from_csv
  else:
    csv_path = paths.join(a.out, study.csv_name)
    export(study, a.workdir or f"workdirs/{study.name}", csv_path,
           extra=a.set, scale=a.scale, probe=not a.no_probes,
           merge_csv=a.merge_csv)
    print(f"wrote {csv_path}")
  for f in report(study, csv_path, a.out, check=not a.unchecked):
    print(f"wrote {f}")
  return 0
