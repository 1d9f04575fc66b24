r"""Where two compiled programs differ in HBM traffic, op by op.

    python benchmarks/pod_step.py --topology=v5e-8 --per_chip=16 \
        --implementation=dense --hlo_dir=/tmp/hlo     # writes <side>.hlo.txt
    python benchmarks/hlo_diff.py /tmp/hlo/reference.hlo.txt \
        /tmp/hlo/softattn_softmax.hlo.txt

Reads each program's optimized HLO text (entry computation only: the steps
compared here have no loops), charges every top-level op its operands'
and result's bytes (what XLA's "bytes accessed" adds up, before VMEM
staging), and groups the ops by kind, result shape and operand shapes, so
an op that one program has and the other lacks shows as one line with its
total. Prints the groups with the largest difference either way. A tool to
find where to look, not a bound: the compiled cost analysis is that.
"""

from __future__ import annotations

import argparse
import collections
import re

from softattn.aot import collectives

FREE = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
        "copy-start", "copy-done", "after-all", "partition-id", "replica-id"}


def _shape_and_rest(rest: str) -> tuple[str, str]:
  """A result shape (an array or a parenthesised tuple) and what follows."""
  if not rest.startswith("("):
    shape, _, tail = rest.partition(" ")
    return shape, tail
  depth = 0
  for i, ch in enumerate(rest):
    depth += (ch == "(") - (ch == ")")
    if depth == 0:
      return rest[:i + 1], rest[i + 1:].lstrip()
  return rest, ""


def _operands(tail: str) -> list[str]:
  depth, i = 1, 0
  while i < len(tail) and depth:
    depth += (tail[i] == "(") - (tail[i] == ")")
    i += 1
  return re.findall(r"%([\w.\-]+)", tail[:i - 1])


def ops(hlo_text: str) -> list[dict]:
  """The entry computation's ops: name, kind, result, operand shapes, bytes."""
  shapes, out = {}, []
  for line in collectives._split(hlo_text)["__entry__"]:  # pylint: disable=protected-access
    m = collectives._INSTR.match(line)  # pylint: disable=protected-access
    if not m:
      continue
    name, rest = m.groups()
    shape, tail = _shape_and_rest(rest)
    plain = re.sub(r"\{[^}]*\}", "", shape)
    shapes[name] = (sum(collectives.array_bytes(shape)), plain)
    op = re.match(r"([\w\-]+)\(", tail)
    if not op or op.group(1) in FREE:
      continue
    args = [shapes.get(a, (0, "?")) for a in _operands(tail[op.end():])]
    kind = re.search(r"kind=(k\w+)", rest)
    where = re.search(r'op_name="([^"]*)"', rest)
    out.append(dict(
        name=name, op=op.group(1) + (f":{kind.group(1)}" if kind else ""),
        result=plain, operands=tuple(sorted(s for _, s in args)),
        bytes=shapes[name][0] + sum(b for b, _ in args),
        where=where.group(1) if where else ""))
  return out


def diff(a: list[dict], b: list[dict], top: int = 15) -> str:
  key = lambda o: (o["op"], o["result"], o["operands"])  # noqa: E731
  total = {"a": collections.Counter(), "b": collections.Counter()}
  count = {"a": collections.Counter(), "b": collections.Counter()}
  example = {}
  for side, program in (("a", a), ("b", b)):
    for o in program:
      total[side][key(o)] += o["bytes"]
      count[side][key(o)] += 1
      example.setdefault(key(o), o)
  keys = set(total["a"]) | set(total["b"])
  delta = {k: total["b"][k] - total["a"][k] for k in keys}
  lines = [f"total GB: a {sum(total['a'].values()) / 1e9:.3f}, "
           f"b {sum(total['b'].values()) / 1e9:.3f}"]
  for title, order in (("b - a, largest first", -1), ("a - b", 1)):
    lines.append(f"-- {title}: MB  (ops in a, b)  kind  result  <- operands  (b's op)")
    for k in sorted(keys, key=lambda k: order * delta[k])[:top]:
      o = example[k]
      lines.append(f"{delta[k] / 1e6:+9.1f}  ({count['a'][k]}, {count['b'][k]})"
                   f"  {o['op']}  {o['result'][:60]}  <- "
                   f"{', '.join(s[:28] for s in o['operands'][:5])}  "
                   f"{o['where'][-60:]}")
  return "\n".join(lines)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("a")
  ap.add_argument("b")
  ap.add_argument("--top", type=int, default=15)
  args = ap.parse_args()
  with open(args.a) as fa, open(args.b) as fb:
    print(diff(ops(fa.read()), ops(fb.read()), args.top))


if __name__ == "__main__":
  main()
