"""``python -m softattn.studies {summary,regenerate} [--experiments DIR]``.

``summary``: the verdict counts of every study with a committed
``runs.csv``, written between the summary markers at the top of
``DIR/README.md``. ``regenerate``: first every such study's RESULTS.md and
plots from its ``runs.csv`` alone (what ``report.py --from-csv`` does for
one study), then the summary: the one command behind every committed
result."""

from __future__ import annotations

import argparse
import os
import sys

from softattn import configlib
from softattn.studies import claims, render, runs, study as study_lib


def _studies(experiments: str):
  """(name, Study, path of its runs.csv or None) for each study folder."""
  for name in sorted(os.listdir(experiments)):
    rep = os.path.join(experiments, name, "report.py")
    if not os.path.exists(rep):
      continue
    study = configlib.load_module(rep).STUDY
    csv_path = os.path.join(experiments, name, study.csv_name)
    yield name, study, csv_path if os.path.exists(csv_path) else None


def summary_rows(experiments: str, found=None) -> list:
  """(name, verdicts or None) per study; ``found``: ``_studies``' output,
  when the caller has loaded the studies already."""
  return [(name, claims.judge_all(study.claims, runs.read_csv(csv_path))
           if csv_path else None)
          for name, study, csv_path in found or _studies(experiments)]


def write_summary(experiments: str, found=None) -> str:
  readme = os.path.join(experiments, "README.md")
  with open(readme, encoding="utf-8") as f:
    text = f.read()
  table = render.summary_table(summary_rows(experiments, found))
  with open(readme, "w", encoding="utf-8") as f:
    f.write(render.replace_summary(text, table))
  return readme


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("command", choices=["summary", "regenerate"])
  p.add_argument("--experiments", default="experiments")
  a = p.parse_args(argv)
  found = list(_studies(a.experiments))   # each report.py loaded once
  if a.command == "regenerate":
    for name, study, csv_path in found:
      if csv_path:
        for f in study_lib.report(study, csv_path,
                                  os.path.join(a.experiments, name)):
          print(f"wrote {f}")
  print(f"wrote {write_summary(a.experiments, found)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
