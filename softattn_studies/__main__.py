"""``python -m softattn_studies {summary,regenerate,preregistration}
[--experiments DIR]``.

``summary``: the verdict counts of every study with a committed
``runs.csv``, written between the summary markers at the top of
``DIR/README.md``: the paper's claims counted, the studies' own sanity
checks (``Claim.kind``) listed apart. ``regenerate``: first every such
study's RESULTS.md and plots from its ``runs.csv`` alone (what
``report.py --from-csv`` does for one study), then the summary: the one
command behind every committed result. ``preregistration``: which claims
were declared before their data, from git history
(``softattn_studies.preregistration``)."""

from __future__ import annotations

import argparse
import os
import sys

from softattn.sweep import records
from softattn_studies import claims, render, study as study_lib


def summary_rows(experiments: str, found=None, kind: str = claims.PAPER
                 ) -> list:
  """(name, verdicts of its ``kind`` claims, or None) per study;
  ``found``: ``_studies``' output, when the caller has loaded the studies
  already."""
  return _of_kind(_judged(found or study_lib.studies_in(experiments)), kind)


def _of_kind(judged, kind: str) -> list:
  return [(name, claims.of_kind(study.claims, v, kind) if v else None)
          for name, study, v in judged]


def _judged(found) -> list:
  """(name, Study, verdicts of every claim or None) per study."""
  return [(name, study, claims.judge_all(study.claims, records.read_csv(
      csv_path)) if csv_path else None) for name, study, csv_path in found]


def summary_text(experiments: str, found=None) -> str:
  """The counts of the paper's claims per study, then the sanity checks
  (not the paper's: what its claims presuppose), one line each."""
  judged = _judged(found or study_lib.studies_in(experiments))
  table = render.summary_table(_of_kind(judged, claims.PAPER))
  if all(v is None for _, _, v in judged):
    return table     # no study has data: the table says so
  checks = [f"`{name}` `{c.id}`: {v[c.id].word}" for name, study, v in judged
            if v for c in study.claims if c.kind == claims.SANITY]
  text = "The papers' claims alone, by verdict:\n\n" + table
  if checks:
    text += ("\n\nSanity checks (the studies' own, not the papers', so not "
             "counted above: what a paper claim presupposes, e.g. that a "
             "model's attention layers matter at all): "
             + "; ".join(checks) + ".")
  return text


def write_summary(experiments: str, found=None) -> str:
  readme = os.path.join(experiments, "README.md")
  with open(readme, encoding="utf-8") as f:
    text = f.read()
  table = summary_text(experiments, found)
  with open(readme, "w", encoding="utf-8") as f:
    f.write(render.replace_summary(text, table))
  return readme


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("command", choices=["summary", "regenerate",
                                     "preregistration"])
  p.add_argument("--experiments", default="experiments")
  p.add_argument("--write", action="store_true", help="preregistration: "
                 "also write its section of DIR/README.md and the cache")
  p.add_argument("--json", action="store_true", help="preregistration: "
                 "every claim's record as JSON")
  p.add_argument("--detail", action="store_true", help="preregistration: "
                 "each post hoc claim's changes, field by field")
  p.add_argument("--rebuild", action="store_true", help="preregistration: "
                 "load every commit's declarations again (no cache)")
  a = p.parse_args(argv)
  if a.command == "preregistration":
    from softattn_studies import preregistration  # pylint: disable=g-import-not-at-top
    return preregistration.main(a.experiments, write=a.write,
                                as_json=a.json, detail=a.detail,
                                rebuild=a.rebuild)
  found = list(study_lib.studies_in(a.experiments))   # each report.py loaded once
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
