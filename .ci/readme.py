"""The README's two fresh-machine commands, as CI runs them: verbatim.

  python3 .ci/readme.py command setup    # prints command 1 (set up, run the main job)
  python3 .ci/readme.py command test     # prints command 2 (pass the tests)
  python3 .ci/readme.py check-table LOG  # LOG's final quickstart table == README's

Each command is the one-line body of the ```bash fence that follows a
`<!-- ci:NAME -->` marker in README.md, so what a newcomer copies is what CI
runs. check-table compares the README's result table, column by column, with
the last table command 1 printed (numbers to within TOLERANCE) (the quickstart also prints status and wall
time, which the README leaves out). Standard library only: it runs on the
system python3 before any virtual environment exists.
"""

from __future__ import annotations

import pathlib
import re
import sys

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def command(name: str, text: str) -> str:
  """The single command in the ```bash fence right after <!-- ci:name -->."""
  m = re.search(rf"<!-- ci:{re.escape(name)} -->\s*```bash\n(.*?)```", text, re.S)
  if not m:
    raise SystemExit(f"README.md has no '<!-- ci:{name} -->' marker followed by "
                     "a ```bash fence; put the marker on the line before it.")
  lines = [x for x in m.group(1).splitlines() if x.strip()]
  if len(lines) != 1:
    raise SystemExit(f"README.md's ci:{name} fence holds {len(lines)} lines; it "
                     "must hold exactly one command (a newcomer pastes it whole).")
  return lines[0]


def tables(text: str) -> list[list[dict[str, str]]]:
  """Every markdown table in text, as rows of {header: cell}."""
  found, block = [], []
  for line in text.splitlines() + [""]:
    if line.startswith("|") and line.rstrip().endswith("|"):
      block.append([c.strip() for c in line.strip().strip("|").split("|")])
      continue
    if len(block) > 2 and set("".join(block[1])) <= set("-: "):
      found.append([dict(zip(block[0], r)) for r in block[2:]])
    block = []
  return found


def readme_table(text: str) -> list[dict[str, str]]:
  """The README's quickstart result table: the one right after command 1."""
  after = text.split("<!-- ci:setup -->", 1)[-1]
  for t in tables(after):
    if t and {"normalizer", "test accuracy"} <= set(t[0]):
      return t
  raise SystemExit("README.md has no quickstart table (normalizer ... test "
                   "accuracy) after the ci:setup command.")


# Numbers agree to this absolute difference (the table prints 4 decimals).
# Runs here reproduced the README's table exactly, but one environment
# without the test extra moved one test accuracy by 2 examples in 10,000
# (0.7782 -> 0.7784, losses equal); a broken normalizer or loop moves them
# by far more.
TOLERANCE = 1e-3


def _close(a, b) -> bool:
  try:
    return abs(float(a) - float(b)) <= TOLERANCE
  except (TypeError, ValueError):
    return False


def check_table(log: str, text: str) -> list[str]:
  """Differences between the README's table and the log's last one."""
  want = readme_table(text)
  printed = [t for t in tables(log) if t and "normalizer" in t[0]]
  if not printed:
    return ["command 1 printed no result table"]
  got = {r["normalizer"]: r for r in printed[-1]}
  problems = []
  for row in want:
    name = row["normalizer"]
    if name not in got:
      problems.append(f"{name}: not in the printed table")
      continue
    for col, value in row.items():
      printed = got[name].get(col)
      if printed != value and not _close(printed, value):
        problems.append(f"{name} {col}: README {value}, printed {printed}")
      elif printed != value:
        print(f"note: {name} {col}: README {value}, printed {printed} "
              f"(within {TOLERANCE})")
  extra = set(got) - {r["normalizer"] for r in want}
  problems += [f"{name}: printed but not in the README" for name in sorted(extra)]
  return problems


def main(argv: list[str]) -> int:
  text = README.read_text()
  if len(argv) == 2 and argv[0] == "command":
    print(command(argv[1], text))
    return 0
  if len(argv) == 2 and argv[0] == "check-table":
    problems = check_table(pathlib.Path(argv[1]).read_text(), text)
    for p in problems:
      print(f"README table mismatch: {p}", file=sys.stderr)
    if not problems:
      print(f"command 1's final table matches the README's "
            f"({len(readme_table(text))} rows)")
    return 1 if problems else 0
  print(__doc__, file=sys.stderr)
  return 2


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
