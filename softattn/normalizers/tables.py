"""The docs' tables of normalizers, rendered from the registry, never by hand.

* README.md's normalizer table (``registry.markdown_table``): one row per
  registered name, from each declaration's ``formula``, ``source`` and mode.
* docs/kernels.md's table of modes (``kernels_table``): for each mode of
  ``softattn.modes.MODES`` the normalizers that declare it, whether the
  chunked and the fused paths run them (asked of the code:
  ``Normalizer.streamable``, ``softattn.pallas.unsupported_reason``) and how
  (``Mode.how``); then the ``rowwise`` normalizers by their ``stream``, and
  ``prenorm`` of any of them.

Each table sits in its file between ``<!-- {marker} ... -->`` and
``<!-- /{marker} -->``. ``python -m softattn.normalizers --write`` rewrites
them there (``WRITE_COMMAND``); ``tests/test_readme_normalizers.py`` fails
while a committed table differs from its rendering.
"""

from __future__ import annotations

import argparse
import pathlib
import re
from typing import Callable, NamedTuple

from softattn import modes as modes_lib
from softattn.normalizers import registry
from softattn.normalizers.core import ROWWISE, Normalizer

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the source checkout
COMMAND = "python -m softattn.normalizers"
WRITE_COMMAND = f"{COMMAND} --write"

# A normalizer's note after its name in docs/kernels.md's table.
NOTES = {
    "relu_seqlen": "all `act`",
    "lssar": "as `softmax(p log softplus(y))`, the same weights as `g/Σg` "
             "without softplus's underflow",
}

# The rowwise normalizers' rows, by the kind of their ``stream`` (``_kind``):
# the mode cell, the words after the chunked and the fused paths' yes, and
# how (the prose below the table explains each).
STREAM_ROWS = {
    "threshold": ("`rowwise` with a threshold `stream`", "in several passes",
                  "as pointwise-kernel passes",
                  "below (`softattn/streams.py`, "
                  "`softattn/pallas/common/streams.py`)"),
    "scan": ("`rowwise` with a scan `stream`", "one reverse scan",
             "kernels of its own (key blocks last to first)",
             "below (`softattn/pallas/tpu/stick.py`)"),
    None: ("`rowwise` with no `stream`", "", "", "dense only: its weights "
           "need the whole row at once"),
}


def _kind(norm: Normalizer):
  if norm.stream is None:
    return None
  return "threshold" if norm.stream.alpha is not None else "scan"


def _fuses(norm: Normalizer) -> bool:
  from softattn import pallas  # pylint: disable=g-import-not-at-top (a cycle)
  return pallas.unsupported_reason(norm) is None


def _support(norms, ok, words="") -> str:
  """``yes`` when ``ok`` holds for every one of ``norms``, ``no`` when for
  none, else the exceptions; ``words`` follow a yes."""
  bad = [n.name for n in norms if not ok(n)]
  if not norms:
    return "—"
  if len(bad) == len(norms):
    return "no"
  text = "yes" + (f", {words}" if words else "")
  return text + (f" (not {', '.join(bad)})" if bad else "")


def _names(norms) -> str:
  return ", ".join(n.name + (f" ({NOTES[n.name]})" if n.name in NOTES else "")
                   for n in norms)


def _scalar_note(mode: modes_lib.Mode, norms) -> str:
  """What a mode with ``scalar_grad`` adds on the fused path: its scalar may
  be an array (a learnable one), not only a number."""
  if mode.scalar_grad is None:
    return ""
  scalars = sorted({n.eps_param for n in norms if n.eps_param})
  learned = [f"{n.name}'s learnable `{n.eps_param}` "
             f"{n.learnable[n.eps_param].shape.replace('_', ' ')}"
             for n in norms if n.eps_param in n.learnable]
  return (f" (the {', '.join(f'`{s}`' for s in scalars)} a number, or an "
          f"array" + (f": {', '.join(learned)}" if learned else "") + ")")


def kernels_table() -> str:
  """docs/kernels.md's table: which normalizers stream, which fuse, how.

  Raises:
    ValueError: a mode with no ``how``, a ``NOTES`` entry for a name that
      is not registered, a rowwise stream of an unknown kind.
  """
  factories = registry._FACTORY_ROWS  # pylint: disable=protected-access
  declared = registry.declarations()
  unknown = sorted(set(NOTES) - {n.name for n in declared})
  if unknown:
    raise ValueError(f"tables.NOTES names unregistered normalizers {unknown}")
  rows = []
  for key, mode in modes_lib.MODES.items():
    if not mode.how:
      raise ValueError(f"mode {key!r} has no `how`: give its Mode in "
                       f"softattn/modes.py how= (docs/kernels.md's words)")
    norms = [n for n in declared if n.mode == key]
    fused = _support(norms, _fuses)
    if fused.startswith("yes"):
      fused += _scalar_note(mode, norms)
    rows.append((f"`{key}`", _names(norms) or "none yet",
                 _support(norms, lambda n: n.streamable), fused, mode.how))
  rowwise = [n for n in declared if n.mode == ROWWISE]
  for kind in {_kind(n): None for n in rowwise}:
    if kind not in STREAM_ROWS:
      raise ValueError(f"no row for rowwise streams of kind {kind!r}: add it "
                       f"to tables.STREAM_ROWS")
    label, chunked, fused, how = STREAM_ROWS[kind]
    norms = [n for n in rowwise if _kind(n) == kind]
    rows.append((label, _names(norms),
                 _support(norms, lambda n: n.streamable, chunked),
                 _support(norms, _fuses, fused), how))
  for key, (_, streams, _) in sorted(factories.items()):
    wrapped = [registry.get(f"{key}({n.name})") for n in declared]
    rows.append(("as `f`'s", f"`{key}(f)`, `f` any normalizer above",
                 _support(wrapped, lambda n: n.streamable),
                 _support(wrapped, _fuses), streams))
  lines = ["| mode | normalizers | chunked (XLA) | pallas (fused) | how |",
           "|---|---|---|---|---|"]
  for row in rows:
    lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
  return "\n".join(lines)


class Table(NamedTuple):
  """A rendered table: its file (relative to the checkout), its marker and
  the command-line option that prints it."""
  path: str
  marker: str
  render: Callable[[], str]
  option: str

  @property
  def command(self) -> str:
    return f"{COMMAND} {self.option}".strip()


TABLES = (
    Table("README.md", "normalizers:table", registry.markdown_table, ""),
    Table("docs/kernels.md", "normalizers:kernels", kernels_table,
          "--kernels-table"),
)


def _span(table: Table, text: str) -> re.Match:
  m = re.search(rf"<!-- {re.escape(table.marker)}[^\n]*-->\n(.*?)\n"
                rf"<!-- /{re.escape(table.marker)} -->", text, re.S)
  if m is None:
    raise ValueError(f"{table.path} has no '<!-- {table.marker} -->' ... "
                     f"'<!-- /{table.marker} -->' markers")
  return m


def committed(table: Table, root: pathlib.Path = ROOT) -> str:
  """The table as ``table.path`` holds it, between its markers."""
  return _span(table, (root / table.path).read_text()).group(1)


def write(root: pathlib.Path = ROOT) -> list[str]:
  """Rewrites every table between its markers; returns the files changed."""
  changed = []
  for table in TABLES:
    path = root / table.path
    text = path.read_text()
    m = _span(table, text)
    new = text[:m.start(1)] + table.render() + text[m.end(1):]
    if new != text:
      path.write_text(new)
      changed.append(table.path)
  return changed


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(
      prog=COMMAND, description="Prints the README's normalizer table "
      "(default) or docs/kernels.md's table of modes, rendered from the "
      "registry, or rewrites both in the source checkout.")
  group = parser.add_mutually_exclusive_group()
  group.add_argument("--kernels-table", action="store_true",
                     help="print docs/kernels.md's table of modes")
  group.add_argument("--write", action="store_true",
                     help="rewrite " + ", ".join(t.path for t in TABLES) +
                     f" between their markers (under {ROOT})")
  args = parser.parse_args(argv)
  if args.write:
    missing = [t.path for t in TABLES if not (ROOT / t.path).is_file()]
    if missing:
      parser.exit(2, f"{COMMAND}: no {', '.join(missing)} under {ROOT}; "
                     f"--write runs in a source checkout\n")
    changed = write()
    print("rewrote " + ", ".join(changed) if changed else
          "every table is up to date")
  else:
    print(TABLES[1 if args.kernels_table else 0].render())
