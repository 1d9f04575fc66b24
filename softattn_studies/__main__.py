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
from softattn_studies import claims, render, summary
from softattn_studies import study as study_lib


def summary_rows(experiments: str, found=None) -> list:
  """(name, ``summary.Tally`` of its claims, or None without data) per
  study; ``found``: ``study.studies_in``'s output, when the caller has
  loaded the studies already."""
  return [(name, t) for name, _, _, t in _judged(
      found or study_lib.studies_in(experiments))]


def _judged(found) -> list:
  """(name, Study, verdicts, Tally) per study (None, None without data)."""
  out = []
  for name, study, csv_path in found:
    if not csv_path:
      out.append((name, study, None, None))
      continue
    runs = records.read_csv(csv_path)
    ver = claims.judge_all(study.claims, runs)
    counts, _ = summary.of_study(study, runs, ver, os.path.dirname(csv_path))
    out.append((name, study, ver, counts))
  return out


def summary_text(experiments: str, found=None) -> str:
  """The counts of the paper's claims per study (``summary.table``), then
  the sanity checks (not the paper's: what its claims presuppose), one
  line each."""
  judged = _judged(found or study_lib.studies_in(experiments))
  if all(v is None for _, _, v, _ in judged):
    return ("No committed per-run data (`runs.csv`) yet. Studies without "
            "data: " + ", ".join(f"`{n}`" for n, *_ in judged) + ".")
  text = ("The papers' claims alone, by how each was declared "
          "(`softattn_studies.preregistration`: *pre-registered* before "
          "any run it judges was committed, *post hoc* declared or changed "
          "after) and by verdict; the verdict columns count empirical "
          "claims, deterministic counts that hold by construction are "
          "apart:\n\n" + summary.table([(n, t) for n, _, _, t in judged]))
  checks = [f"`{name}` `{c.id}`: {v[c.id].word}" for name, study, v, _ in
            judged if v for c in study.claims if c.kind == claims.SANITY]
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
