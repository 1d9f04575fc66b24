"""Where the test suite's time goes: per file, per test, compiling vs the rest.

  python -m pytest -n 2 -q --compile-tally=/tmp/tally
  python benchmarks/suite_time.py /tmp/tally [--top 25]

reads the per-worker files ``tests/compile_tally.py`` wrote (or one file of
them joined, gzipped or not: ``benchmarks/results/suite_*/tally_*.jsonl.gz``)
and prints, in
Markdown, each test file's wall seconds (summed over its tests, fixtures
included), the in-process jax seconds (tracing, lowering, XLA compiling) and
the number of XLA compiles, then the slowest tests. The wall seconds of a
test that starts subprocesses include theirs; its jax seconds do not.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os


def load(prefix: str) -> list[dict]:
  """The records of ``prefix.<worker>`` files, or of one (gzipped) file."""
  rows = []
  paths = [prefix] if os.path.isfile(prefix) else sorted(glob.glob(prefix + ".*"))
  for path in paths:
    with (gzip.open if path.endswith(".gz") else open)(
        path, "rt", encoding="utf-8") as f:
      rows.extend(json.loads(line) for line in f if line.strip())
  return rows


def table(rows: list[dict], top: int) -> str:
  jax_s = lambda r: sum(r.get(k, 0.0) for k in ("trace_s", "lower_s",
                                                 "compile_s"))
  files = collections.defaultdict(lambda: [0.0, 0.0, 0, 0])
  for r in rows:
    f = files[r["test"].split("::")[0]]
    f[0] += r["wall_s"]
    f[1] += jax_s(r)
    f[2] += r.get("compiles", 0)
    f[3] += 1
  total = sum(r["wall_s"] for r in rows)
  out = [f"{len(rows)} tests, {total:.0f} s of test time in all "
         f"(workers added up), {sum(map(jax_s, rows)):.0f} s of it in-process "
         "jax tracing/lowering/compiling", "",
         "| file | tests | wall s | jax s | compiles |", "|---|---|---|---|---|"]
  for name, (wall, js, n, count) in sorted(files.items(),
                                           key=lambda kv: -kv[1][0]):
    out.append(f"| {name} | {count} | {wall:.0f} | {js:.0f} | {n} |")
  out += ["", "| slowest tests | wall s | jax s | compiles |",
          "|---|---|---|---|"]
  for r in sorted(rows, key=lambda r: -r["wall_s"])[:top]:
    out.append(f"| {r['test']} | {r['wall_s']:.1f} | {jax_s(r):.1f} | "
               f"{r.get('compiles', 0)} |")
  return "\n".join(out)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("prefix", help="the --compile-tally FILE")
  parser.add_argument("--top", type=int, default=25)
  args = parser.parse_args()
  print(table(load(args.prefix), args.top))


if __name__ == "__main__":
  main()
