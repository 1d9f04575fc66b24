"""``python -m softattn.studies summary [--experiments DIR]``: the verdict
counts of every study with a committed ``runs.csv``, written between the
summary markers at the top of ``DIR/README.md``."""

from __future__ import annotations

import argparse
import os
import sys

from softattn.studies import claims, probes, render, runs


def summary_rows(experiments: str) -> list:
  rows = []
  for name in sorted(os.listdir(experiments)):
    rep = os.path.join(experiments, name, "report.py")
    if not os.path.exists(rep):
      continue
    study = probes.load_module(rep).STUDY
    csv_path = os.path.join(experiments, name, study.csv_name)
    rows.append((name, claims.judge_all(study.claims, runs.read_csv(csv_path))
                 if os.path.exists(csv_path) else None))
  return rows


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("command", choices=["summary"])
  p.add_argument("--experiments", default="experiments")
  a = p.parse_args(argv)
  readme = os.path.join(a.experiments, "README.md")
  with open(readme, encoding="utf-8") as f:
    text = f.read()
  table = render.summary_table(summary_rows(a.experiments))
  with open(readme, "w", encoding="utf-8") as f:
    f.write(render.replace_summary(text, table))
  print(f"wrote {readme}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
