"""Line and branch coverage of softattn/, per module, before and after a change.

  COVERAGE_FILE=/tmp/cov/.coverage python -m pytest -n 2 -q \
      --cov=softattn --cov-config=benchmarks/coverage.ini --cov-report=
  COVERAGE_FILE=/tmp/cov/.coverage coverage combine --append \
      --rcfile=benchmarks/coverage.ini /tmp/cov/
  COVERAGE_FILE=/tmp/cov/.coverage coverage json \
      --rcfile=benchmarks/coverage.ini -o after.json
  python benchmarks/coverage_table.py before.json after.json

(``coverage json``'s files, gzipped or not: benchmarks/results/suite_*/)
prints, in Markdown, each module's covered lines and branches in both runs
and marks a module whose line or branch coverage fell. Exit status 1 when
one did (a module only one run has is listed, not judged).
"""

from __future__ import annotations

import gzip
import json
import sys


def _per_module(path: str) -> dict[str, tuple[int, int, int, int]]:
  with (gzip.open if path.endswith(".gz") else open)(
      path, "rt", encoding="utf-8") as f:
    files = json.load(f)["files"]
  return {name: (s["covered_lines"], s["num_statements"],
                 s.get("covered_branches", 0), s.get("num_branches", 0))
          for name, s in ((n, v["summary"]) for n, v in files.items())}


def _pct(covered: int, total: int) -> float:
  return 100.0 * covered / total if total else 100.0


def table(before: str, after: str) -> tuple[str, int]:
  a, b = _per_module(before), _per_module(after)
  rows = ["| module | lines before | lines after | branches before | "
          "branches after | |", "|---|---|---|---|---|---|"]
  fell = 0
  for name in sorted(a.keys() | b.keys()):
    cells, mark = [], ""
    for i in (0, 2):  # lines, then branches
      was = _pct(*a[name][i:i + 2]) if name in a else None
      now = _pct(*b[name][i:i + 2]) if name in b else None
      cells += [f"{was:.1f}" if was is not None else "-",
                f"{now:.1f}" if now is not None else "-"]
      if was is not None and now is not None and now < was - 1e-9:
        mark = "fell"
    fell += bool(mark)
    rows.append(f"| {name} | {cells[0]} | {cells[1]} | {cells[2]} | "
                f"{cells[3]} | {mark} |")
  totals = [sum(v[i] for v in d.values()) for d in (a, b) for i in range(4)]
  rows.append(f"| **all** | {_pct(*totals[0:2]):.1f} | {_pct(*totals[4:6]):.1f}"
              f" | {_pct(*totals[2:4]):.1f} | {_pct(*totals[6:8]):.1f} | |")
  return "\n".join(rows), fell


def main() -> None:
  text, fell = table(*sys.argv[1:3])
  print(text)
  sys.exit(1 if fell else 0)


if __name__ == "__main__":
  main()
