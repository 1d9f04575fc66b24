"""Building blocks for declaring a sweep: lists of config overrides.

A sweep is a list of override dicts, each mapping a dotted config path
(``"model.normalizer"``, ``"seed"``) to the value that one run uses. The helpers
below build such lists the way a sweep is usually said out loud::

    product(
        sweep("model.variant", ["mu/4", "Ti/4"]),
        sweep("model.normalizer", ["softmax", "relu_seqlen"]),
        sweep("seed", [0, 1]),
    )                                     # 2 x 2 x 2 = 8 runs

    chain(product(...), product(...))     # two grids, one after the other
    zip_(sweep("total_steps", [1000, 2000]), sweep("schedule.warmup_steps",
                                                   [100, 200]))  # paired

Every helper returns a plain ``list[dict]``, so a sweep config may also write
the list by hand. Order is preserved (the last factor of ``product`` varies
fastest), which keeps run order and run names stable across invocations.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from typing import Any, Iterable, Sequence

Overrides = dict[str, Any]


def sweep(field: str, values: Iterable[Any]) -> list[Overrides]:
  """One run per value of ``field``: ``[{field: v} for v in values]``."""
  values = list(values)
  if not values:
    raise ValueError(f"sweep({field!r}, []) has no values; give at least one.")
  return [{field: v} for v in values]


def fixed(field: str, value: Any) -> list[Overrides]:
  """A one-run factor: sets ``field`` to ``value`` in every run of a product."""
  return [{field: value}]


def product(*factors: Sequence[Overrides]) -> list[Overrides]:
  """The Cartesian product of override lists (later factors vary fastest).

  Raises:
    ValueError: two factors set the same field (their product would silently
      keep only one of the values).
  """
  return _merge_rows(itertools.product(*factors))


def zip_(*factors: Sequence[Overrides]) -> list[Overrides]:
  """Pairs override lists element-wise (all must have the same length)."""
  lengths = {len(f) for f in factors}
  if len(lengths) > 1:
    raise ValueError(f"zip_() needs factors of equal length, got "
                     f"{[len(f) for f in factors]}.")
  return _merge_rows(zip(*factors))


def _merge_rows(rows: Iterable[Sequence[Overrides]]) -> list[Overrides]:
  """Merges each row of override dicts into one dict."""
  out = []
  for row in rows:
    merged: Overrides = {}
    for part in row:
      clash = set(merged) & set(part)
      if clash:
        raise ValueError(f"two sweep factors both set {sorted(clash)}; set "
                         "each field in one factor only.")
      merged.update(part)
    out.append(merged)
  return out


def chain(*sweeps: Sequence[Overrides]) -> list[Overrides]:
  """Concatenates sweeps (e.g. two grids with different budgets)."""
  return [dict(o) for s in sweeps for o in s]


# Run names become directory names (locally and on GCS) and shell words, so
# they keep to a conservative alphabet.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]+")


def _clean(value: Any) -> str:
  text = str(value).replace("/", "")  # "Ti/4" -> "Ti4": the usual short name
  text = _UNSAFE.sub(".", text).strip(".")
  return text or "empty"


def run_names(sweep_list: Sequence[Overrides]) -> list[str]:
  """Stable, unique, filesystem-safe names, one per override dict.

  A name lists ``key-value`` pairs joined by ``__`` in the order the overrides
  were declared, ``key`` being the last component of the config path (the full
  path, dots as ``-``, where two swept fields share a last component). Values
  keep ``[A-Za-z0-9_.+-]``; ``/`` is dropped (``Ti/4`` -> ``Ti4``) and other runs
  of characters become ``.`` (``normsoftmax(gamma=sqrt_d)`` ->
  ``normsoftmax.gamma.sqrt_d``). Fields that are the same in every run are left
  out of the name. If two runs still clash, both get a short hash of their
  overrides appended, so names never depend on anything but the declaration.
  """
  fields: list[str] = []
  for o in sweep_list:
    fields.extend(f for f in o if f not in fields)
  varying = [f for f in fields
             if len({repr(o.get(f, "<unset>")) for o in sweep_list}) > 1]
  if not varying:  # a one-run sweep (or all identical): still name it
    varying = fields
  last = [f.rsplit(".", 1)[-1] for f in varying]
  short = {f: (s if last.count(s) == 1 else f.replace(".", "-"))
           for f, s in zip(varying, last)}

  names = []
  for o in sweep_list:
    parts = [f"{short[f]}-{_clean(o[f])}" for f in varying if f in o]
    names.append("__".join(parts) or "base")
  counts = {n: names.count(n) for n in names}
  for i, (n, o) in enumerate(zip(names, sweep_list)):
    if counts[n] > 1:
      digest = hashlib.sha1(json.dumps(o, sort_keys=True, default=repr)
                            .encode()).hexdigest()[:6]
      names[i] = f"{n}__{digest}"
  if len(set(names)) != len(names):
    dup = sorted({n for n in names if names.count(n) > 1})
    raise ValueError(f"the sweep declares identical runs {dup}; remove the "
                     "duplicates.")
  return names
