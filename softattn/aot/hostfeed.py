"""Can one host feed its chips? The launch table's host-feed column.

Each TPU host decodes and augments the images of its own chips. A row of the
launch table trains at ``images/s`` (its roofline bound); the slice has
``hosts`` hosts, so each host must supply ``images/s / hosts``, which takes
``that / r`` cores at the measured rate ``r`` of the training input per core
(``benchmarks/input_pipeline.py``, committed in
``benchmarks/results/input_pipeline.json``). The column compares that with the
host's published vCPUs. It applies to rows whose ``pp_train`` is the one the
benchmark runs (the i21k ViTs' and ResNet-50's: JPEG decode,
``inception_crop(224)``, ``flip_lr``); the CIFAR and Fashion-MNIST rows keep
their small images decoded in memory and are not measured.

Host figures, from the Cloud TPU docs (VM types):

* v4: 4 chips and 240 vCPUs per host (TPU v4 VMs, ``ct4p-hightpu-4t``);
  figure from the published machine type, not re-checked here;
* v5e (cloud.google.com/tpu/docs/v5e, "VM types"): 1 chip / 24 vCPUs
  (``ct5lp-hightpu-1t``), 4 chips / 112 vCPUs (``-4t``), 8 chips / 224 vCPUs
  (``-8t``); slices of 8 chips and more have 8 chips per host (the page's
  table: 16x16 = 256 chips on 32 hosts).

``python -m softattn.aot hostfeed`` fills the column of docs/scale.md from
the table's own images/s and the committed benchmark, without recompiling.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re

from softattn import topology as topology_lib

BENCHMARK = os.path.join(  # in the repository, next to the package
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "benchmarks", "results", "input_pipeline.json")
MEASURED_PP = "inception_crop(224)|flip_lr|value_range(-1, 1)"
HEADER = "host feed: images/s per host, cores of vCPUs"


@dataclasses.dataclass(frozen=True)
class Host:
  chips: int
  vcpus: int
  machine_type: str


def host(topology: str) -> Host:
  """The TPU VM that serves ``topology``'s chips (published figures)."""
  topo = topology_lib.parse(topology)
  chips = math.prod(topo.shape)
  if topo.chip.name == "v4":
    return Host(4, 240, "ct4p-hightpu-4t")
  if topo.chip.name == "v5e":
    if chips == 1:
      return Host(1, 24, "ct5lp-hightpu-1t")
    if chips == 4:
      return Host(4, 112, "ct5lp-hightpu-4t")
    return Host(8, 224, "ct5lp-hightpu-8t")
  raise ValueError(f"no published host figures here for {topo.chip.name} "
                   f"({topology}); add them to softattn/aot/hostfeed.py")


def hosts(topology: str) -> int:
  """Hosts in the slice(s): chips / chips per host, at least one."""
  topo = topology_lib.parse(topology)
  return max(1, topo.num_chips // host(topology).chips)


@dataclasses.dataclass(frozen=True)
class Feed:
  per_host: float   # images/s each host must supply
  cores: float      # cores that takes at the measured rate
  vcpus: int        # the host's published vCPUs


def feed(images_per_s: float, topology: str, per_core: float) -> Feed:
  per_host = images_per_s / hosts(topology)
  return Feed(per_host, per_host / per_core, host(topology).vcpus)


def cell(f: Feed | None, why_not: str = "–") -> str:
  if f is None:
    return why_not
  return f"{f.per_host:,.0f}/s: {f.cores:.0f} of {f.vcpus} vCPUs"


def per_core_rate(path: str = BENCHMARK) -> float:
  """Images/s per core of the training input, from the committed benchmark."""
  with open(path, encoding="utf-8") as f:
    return float(json.load(f)["images_per_s_per_core"])


def row_cell(images_per_s: float | None, topology: str, pp_train: str,
             per_core: float) -> str:
  """The column's cell for one row."""
  if pp_train != MEASURED_PP:
    return "– (other input, not measured)"
  if images_per_s is None:
    return "–"
  return cell(feed(images_per_s, topology, per_core))


def _split(line: str) -> list[str]:
  return [c.strip() for c in line.strip().strip("|").split("|")]


def add_column(markdown: str, pp_of: dict[str, str], per_core: float) -> str:
  """``markdown`` with the host-feed column after ``images/s ≤`` (replaced
  if there), computed from each row's images/s and slice.

  ``pp_of`` maps a row's config label to its ``pp_train``.
  """
  lines = markdown.split("\n")
  start = next(i for i, l in enumerate(lines) if l.startswith("| config |"))
  head = _split(lines[start])
  if HEADER in head:
    drop = head.index(HEADER)
    lines[start:] = _drop_column(lines[start:], drop)
    head = _split(lines[start])
  at = head.index("images/s ≤") + 1
  out = lines[:start]
  for i, line in enumerate(lines[start:], start):
    if not line.startswith("|"):
      out += lines[i:]
      break
    cells = _split(line)
    if i == start:
      new = HEADER
    elif i == start + 1:
      new = "---"
    else:
      rate = cells[at - 1].replace(",", "")
      new = row_cell(float(rate) if re.fullmatch(r"[\d.]+", rate) else None,
                     cells[1], pp_of.get(cells[0], ""), per_core)
    out.append("| " + " | ".join(cells[:at] + [new] + cells[at:]) + " |")
  return "\n".join(out)


def _drop_column(lines: list[str], index: int) -> list[str]:
  out = []
  for i, line in enumerate(lines):
    if not line.startswith("|"):
      return out + lines[i:]
    cells = _split(line)
    out.append("| " + " | ".join(cells[:index] + cells[index + 1:]) + " |")
  return out
