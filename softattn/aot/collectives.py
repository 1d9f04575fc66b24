"""Inter-chip traffic of a compiled program, read from its optimized HLO.

XLA's ``cost_analysis()`` has no communication term, so a roofline built on it
alone misses what often bounds an FSDP step on a pod: the all-gathers of the
weights and the reductions of the gradients over ICI. This module lists every
collective the TPU compiler left in the program (``compiled.as_text()``),
with how often it runs (while-loop trip counts multiply), its group size
``n`` and the bytes one chip sends over ICI for it under the bandwidth-optimal
(ring / bidirectional-torus) algorithms:

==================  ==================================  =====================
op                  bytes on one chip (result ``R``)     why
==================  ==================================  =====================
all-gather          ``R (n-1)/n``                       receives every other
                                                        chip's shard
reduce-scatter      ``R (n-1)``  (input ``R n``)        sends every shard but
                                                        its own, once
all-reduce          ``2 R (n-1)/n``                     reduce-scatter, then
                                                        all-gather
all-to-all          ``R (n-1)/n``                       keeps its own block
collective-permute  ``R``                               one send
==================  ==================================  =====================

The TPU compiler writes a reduce-scatter either as the op or as a fusion
that calls a computation named ``all-reduce-scatter*`` (an all-reduce and a
dynamic slice); the all-reduce inside such a fusion is counted as the
reduce-scatter it implements. ``ici_seconds`` divides by the chip's published
ICI bandwidth (``softattn.topology.Chip.ici_bytes_per_s``): the bytes could
not move faster, so the time is a lower bound, like the roofline's others.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all",
         "collective-permute")

_DTYPE_BYTES = {
    "pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "f8e4m3fn": 1,
    "f8e5m2": 1, "f8e4m3b11fnuz": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1,
    "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
    "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16,
}
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\]")
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OP = re.compile(r"\s(all-gather|all-gather-start|reduce-scatter|all-reduce|"
                 r"all-reduce-start|all-to-all|collective-permute|"
                 r"collective-permute-start)\(")
_CALLS = re.compile(r"\b(calls|body|to_apply|condition)=%?([\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')
_CONST = re.compile(r"=\s*[su](?:32|64)\[\][^ ]*\s+constant\((\d+)\)")


@dataclasses.dataclass(frozen=True)
class Collective:
  kind: str            # one of KINDS
  result_bytes: float  # per chip, one execution
  group: int           # chips taking part together
  count: int = 1       # executions per program run (while trip counts)
  name: str = ""

  @property
  def ici_bytes(self) -> float:
    """Bytes one chip sends per program run (the table in the module doc)."""
    n, r = self.group, self.result_bytes
    per = {"all-gather": r * (n - 1) / n, "reduce-scatter": r * (n - 1),
           "all-reduce": 2 * r * (n - 1) / n, "all-to-all": r * (n - 1) / n,
           "collective-permute": r}[self.kind]
    return per * self.count if n > 1 or self.kind == "collective-permute" else 0.0


def array_bytes(shape_text: str) -> list[float]:
  """Bytes of every array shape in ``shape_text`` (a shape or a tuple)."""
  out = []
  for dtype, dims in _ARRAY.findall(shape_text):
    if dtype not in _DTYPE_BYTES:
      continue
    out.append(_DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",")
                                               if d))
  return out


def group_size(attrs: str, num_devices: int) -> int:
  """Chips per replica group, from any of the forms XLA prints."""
  m = re.search(r"replica_groups=\{\}", attrs)
  if m:
    return num_devices
  m = re.search(r"replica_groups=\{\{([0-9,\s]*)\}", attrs)
  if m:
    return len([x for x in m.group(1).split(",") if x.strip()])
  m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attrs)
  if m:
    return int(m.group(2))
  m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attrs)
  if m:
    sizes = dict(re.findall(r"'([^']+)'=(\d+)", m.group(1)))
    axes = re.findall(r"'([^']+)'", m.group(2))
    return math.prod(int(sizes[a]) for a in axes)
  m = re.search(r"source_target_pairs=\{([^}]*\}?)", attrs)
  if m:
    return 2
  return num_devices


def _split(text: str) -> dict[str, list[str]]:
  """Computation name -> its instruction lines (``ENTRY`` under ``__entry__``
  as well as its own name)."""
  comps: dict[str, list[str]] = {}
  current = None
  for line in text.splitlines():
    if current is None:
      m = _COMP.match(line)
      if m and "=" not in line.split("{")[0].split("(")[0]:
        current = m.group(1)
        comps[current] = []
        if line.lstrip().startswith("ENTRY"):
          comps["__entry__"] = comps[current]
      continue
    if line.strip() == "}":
      current = None
      continue
    comps[current].append(line)
  return comps


def trip_count(rest: str, comps: dict[str, list[str]]) -> int | None:
  """Iterations of a while loop: XLA's ``known_trip_count`` when it printed
  one, else the bound of a ``counter < N`` condition (how ``lax.scan`` and
  ``fori_loop`` lower: the counter starts at 0 and steps by 1)."""
  m = _TRIP.search(rest)
  if m:
    return int(m.group(1))
  cond = re.search(r"condition=%?([\w.\-]+)", rest)
  lines = comps.get(cond.group(1), []) if cond else []
  consts = [int(c) for line in lines for c in _CONST.findall(line)]
  if len(consts) == 1 and any("direction=LT" in x for x in lines):
    return consts[0]
  return None


def parse(hlo_text: str, num_devices: int
          ) -> tuple[list[Collective], list[str]]:
  """Every collective reachable from the entry computation, with counts, and
  the while loops whose trip count could not be read (their collectives
  are counted once: the traffic stays a lower bound)."""
  comps = _split(hlo_text)
  found: dict[tuple, Collective] = {}
  unknown: list[str] = []

  def visit(comp: str, times: int, as_scatter: bool, seen: tuple) -> None:
    if comp not in comps or comp in seen:
      return
    for line in comps[comp]:
      m = _INSTR.match(line)
      if not m:
        continue
      name, rest = m.groups()
      op = _OP.search(" " + rest)
      if op:
        kind = op.group(1).removesuffix("-start")
        shapes = array_bytes(rest[:op.start()])
        if op.group(1) == "all-gather-start":
          shapes = shapes[len(shapes) // 2:]         # (operands, results)
        elif op.group(1) == "collective-permute-start":
          shapes = shapes[1:2]                      # (operand, result, ...)
        if kind == "all-reduce" and as_scatter:
          kind = "reduce-scatter-input"
        n = group_size(rest, num_devices)
        r = float(sum(shapes))
        if kind == "reduce-scatter-input":           # input R n -> result R
          kind, r = "reduce-scatter", r / n
        key = (comp, name)
        found[key] = Collective(kind, r, n, times, name)
      for role, callee in _CALLS.findall(rest):
        if role in ("to_apply", "condition"):
          continue                                  # reducers, loop tests
        k = times
        if role == "body":
          trips = trip_count(rest, comps)
          if trips is None:
            unknown.append(name)
          k *= trips or 1
        visit(callee, k, as_scatter or callee.startswith("all-reduce-scatter"),
              seen + (comp,))

  visit("__entry__", 1, False, ())
  return list(found.values()), unknown


@dataclasses.dataclass(frozen=True)
class Traffic:
  """A program's per-chip ICI traffic, by kind."""
  collectives: tuple[Collective, ...]
  unknown_loops: tuple[str, ...] = ()

  @property
  def ici_bytes(self) -> float:
    return sum(c.ici_bytes for c in self.collectives)

  def by_kind(self) -> dict[str, tuple[int, float]]:
    """kind -> (executions, ICI bytes per chip)."""
    out = collections.OrderedDict((k, [0, 0.0]) for k in KINDS)
    for c in self.collectives:
      out[c.kind][0] += c.count
      out[c.kind][1] += c.ici_bytes
    return {k: (n, b) for k, (n, b) in out.items() if n}

  def describe(self) -> str:
    parts = [f"{k} x{n} {b / 1e9:.3g} GB" for k, (n, b) in self.by_kind().items()]
    if self.unknown_loops:
      parts.append(f"{len(self.unknown_loops)} loop(s) of unknown trip count "
                   "counted once")
    return ", ".join(parts) if parts else "none"


def traffic(hlo_text: str, num_devices: int) -> Traffic:
  found, unknown = parse(hlo_text, num_devices)
  return Traffic(tuple(found), tuple(unknown))
