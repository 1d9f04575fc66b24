"""Per-chip HBM of a compiled TPU program, and the compiler's out-of-memory verdict.

What is read, and why:

* **Fits** is the compiler's own answer: the TPU compiler refuses a program
  that does not fit HBM with ``RESOURCE_EXHAUSTED: Ran out of memory on
  HBM ... (X) exceeds available HBM (Y)``, the error a real pod gives at the
  same point. :func:`parse_oom` keeps both
  figures; nothing here re-derives the limit.
* **Per-chip HBM** of a program that compiled is the total of XLA's buffer
  assignment in the default (HBM) memory space, read from the
  ``*memory-usage-report.txt`` that ``xla_dump_to`` writes: every buffer
  (state, batch, outputs, temporaries) at its assigned offset, buffers with
  disjoint live ranges sharing space, so the total is the HBM the program
  lays out. ``memory_analysis()`` gives other numbers. Measured on the i21k
  Ti/16 train step (fsdp, batch 1024, v5e:4x4, before the FSDP fix):
  buffer assignment 5.33 GiB; ``temp_size_in_bytes`` alone 6.18 GiB (its
  arguments + outputs - aliases + temps: 6.23 GiB), so summing its fields
  over-reports by ~0.9 GiB; ``peak_memory_in_bytes`` 4.43 GiB, under the
  layout it must fit. The report is read when present; otherwise (another
  backend, no dump) the ``memory_analysis()`` sum is reported, marked so.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclasses.dataclass(frozen=True)
class OutOfMemory:
  """The compiler's figures from a RESOURCE_EXHAUSTED compile."""
  used_bytes: float | None
  limit_bytes: float | None
  message: str  # the error's first line mentioning memory


def _bytes(num: str, unit: str) -> float:
  return float(num) * _UNITS[unit[:1].upper()]


def parse_oom(error: BaseException | str) -> OutOfMemory | None:
  """``OutOfMemory`` if ``error`` is the compiler's out-of-memory error, else None."""
  text = str(error)
  if "RESOURCE_EXHAUSTED" not in text and "Ran out of memory" not in text:
    return None
  used = limit = None
  # libtpu 0.0.42: "... required for HLO temporaries (34.01G) exceeds available
  # HBM (15.75G)"; older compilers: "Used 17.71G of 15.75G hbm".
  for pattern in (r"\(([\d.]+)([KMGT]?)i?B?\) exceeds available HBM \(([\d.]+)"
                  r"([KMGT]?)i?B?\)",
                  r"Used\s+([\d.]+)([KMGT]?)i?B?\s+of\s+([\d.]+)([KMGT]?)i?B?\s+hbm"):
    m = re.search(pattern, text, re.IGNORECASE)
    if m:
      used, limit = _bytes(m[1], m[2]), _bytes(m[3], m[4])
      break
  lines = [ln.strip() for ln in text.splitlines()
           if re.search(r"memory|hbm|RESOURCE_EXHAUSTED", ln, re.IGNORECASE)]
  return OutOfMemory(used, limit, (lines or [text.strip()])[0][:300])


def buffer_assignment_bytes(dump_dir: str) -> float | None:
  """HBM total of the buffer assignment dumped in ``dump_dir`` (None if absent)."""
  reports = glob.glob(os.path.join(dump_dir, "*memory-usage-report.txt"))
  if not reports:
    return None
  with open(max(reports, key=os.path.getmtime), encoding="utf-8") as f:
    text = f.read()
  m = re.search(r"Memory Space: default \(color=0\)\s*\nTotal bytes: (\d+)", text)
  return float(m[1]) if m else None


def memory_analysis_bytes(compiled) -> float | None:
  """Arguments + outputs - aliased + temporaries, from ``memory_analysis()``."""
  try:
    ma = compiled.memory_analysis()
  except Exception:  # pylint: disable=broad-except
    return None
  if ma is None:
    return None
  return float(ma.argument_size_in_bytes + ma.output_size_in_bytes
               - ma.alias_size_in_bytes + ma.temp_size_in_bytes)
