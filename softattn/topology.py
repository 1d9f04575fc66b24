"""TPU slices by their usual names, as abstract devices a CPU host can compile for.

``abstract_devices("v5e-256")`` returns the 256 devices of a v5e pod without
any TPU: ``jax.experimental.topologies.get_topology_desc`` builds them from
libtpu (``pip install -e '.[tpu-aot]'``), and ``jax.jit(f).lower(...).compile()``
then compiles the real TPU program for them (``softattn.aot``). ``CHIPS`` is
the one table of TPU generations: ``chip(name)`` gives the chip's published
peak bf16 FLOP/s, HBM capacity and bandwidth for roofline estimates, and its
VMEM and MXU width for the fused kernels' block rule
(``softattn.pallas.tpu.blocks``).

Names, as Cloud TPU spells accelerator types:

* ``v4-N``, ``v5p-N``: N counts TensorCores, two per chip ("megacore": the two
  cores act as one JAX device), so ``v4-32`` is 16 chips = 16 devices;
* ``v5e-N`` (alias ``v5litepod-N``), ``v6e-N``: N counts chips (one core each);
* ``Kx<name>`` (``2xv5e-256``): K slices of that shape, joined by DCN;
* a libtpu topology such as ``v5e:2x2`` or ``v4:2x2x4`` is accepted as is.

The ``get_topology_desc`` arguments follow the layout Google's MaxText uses in
``accelerator_to_spec_map.py`` (and xpk): v5e/v6e slices are 2D (2x2 chips per
host) and wrap into a torus only along a 16-chip side; v4/v5p slices are 3D,
built from 4x4x4-chip cubes, and every slice of whole cubes wraps in all three
dimensions (the optical switches close the torus); smaller ones do not.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class Chip:
  """Published per-chip figures (one chip = one JAX device on every kind here)."""
  name: str
  peak_bf16_flops: float  # FLOP/s, dense bf16 matmul
  hbm_bytes: int
  hbm_bytes_per_s: float
  cores_per_chip: int     # TensorCores; N in v4-N / v5p-N counts these
  libtpu_prefix: str      # how libtpu spells the generation in "v5:2x2x1"
  chip_config_name: str   # "megacore": both cores of a chip form one device
  dims: int               # 2D torus (v5e, v6e) or 3D (v4, v5p)
  # Bytes per second one chip can send over all its ICI links together (half
  # the published bidirectional figure): the roofline's communication term.
  ici_bytes_per_s: float = 0.0
  # The TPU compiler option that turns off memory-space assignment to VMEM
  # (the HBM<->VMEM staging copies that XLA's "bytes accessed" counts on top
  # of the fusions reading the same data). None: the chip has no VMEM
  # staging (v4: its programs carry no VMEM buffers) or no known switch.
  vmem_staging_flag: str | None = None
  _: dataclasses.KW_ONLY
  # VMEM per TensorCore and the MXU's width, as Pallas' own table has them
  # (``pltpu.get_tpu_info_for_chip``; tests/test_topology.py checks they
  # agree): what the fused kernels' block rule reads.
  vmem_bytes: int
  mxu_width: int
  # ``jax.Device.device_kind`` of the chip's devices.
  device_kinds: tuple[str, ...]


_MiB, _GiB = 2**20, 2**30
CHIPS = {
    # cloud.google.com/tpu/docs/v4: 275 TFLOP/s bf16, 32 GiB HBM2, 1200 GB/s;
    # ICI: "all-reduce bandwidth per Pod 1.1 PB/s" over 4096 chips.
    "v4": Chip("v4", 275e12, 32 * _GiB, 1200e9, 2, "v4", "megacore", 3,
               ici_bytes_per_s=1.1e15 / 4096, vmem_bytes=16 * _MiB,
               mxu_width=128, device_kinds=("TPU v4",)),
    # cloud.google.com/tpu/docs/v5e: 197 TFLOP/s bf16, "16 GB" HBM2 at
    # 819 GB/s, bidirectional ICI 400 GB/s per chip. The capacity is 16 GiB:
    # the TPU compiler allows 15.75 GiB of it (> 16e9 bytes), the rest is
    # reserved.
    "v5e": Chip("v5e", 197e12, 16 * _GiB, 819e9, 1, "v5e", "default", 2,
                ici_bytes_per_s=200e9,
                vmem_staging_flag="xla_vf_vmem_memory_space_assignment",
                vmem_bytes=128 * _MiB, mxu_width=128,
                device_kinds=("TPU v5 lite", "TPU v5e")),
    # cloud.google.com/tpu/docs/v5p: 459 TFLOP/s bf16, 95 GiB HBM2e,
    # 2765 GB/s, bidirectional ICI 1200 GB/s per chip. Its programs stage
    # through VMEM, but no libtpu option found here turns that off.
    "v5p": Chip("v5p", 459e12, 95 * _GiB, 2765e9, 2, "v5", "megacore", 3,
                ici_bytes_per_s=600e9, vmem_bytes=64 * _MiB, mxu_width=128,
                device_kinds=("TPU v5", "TPU v5p")),
    # cloud.google.com/tpu/docs/v6e (Trillium): 918 TFLOP/s bf16, 32 GiB HBM,
    # 1638 GB/s, bidirectional ICI 800 GB/s per chip.
    "v6e": Chip("v6e", 918e12, 32 * _GiB, 1638e9, 1, "v6e", "default", 2,
                ici_bytes_per_s=400e9,
                vmem_staging_flag="xla_gf_vmem_memory_space_assignment",
                vmem_bytes=128 * _MiB, mxu_width=256,
                device_kinds=("TPU v6 lite", "TPU v6e")),
}
_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e", "v5": "v5p"}

# 2D slices (v5e, v6e): chips -> (x, y). The 16x16 pod is the full torus.
_SHAPES_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8),
              64: (8, 8), 128: (8, 16), 256: (16, 16)}
# 3D slices (v4, v5p) smaller than one 4x4x4 cube: chips -> (x, y, z).
_SMALL_SHAPES_3D = {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4)}

VALID_FORMS = ("v4-N / v5p-N (N TensorCores: 8, 16, 32, 64, then multiples "
               "of 128), v5e-N / v5litepod-N / v6e-N (N chips: "
               f"{', '.join(map(str, _SHAPES_2D))}), an optional 'Kx' prefix "
               "for K slices (2xv5e-256), or a libtpu topology (v5e:2x2, "
               "v4:2x2x4)")


@dataclasses.dataclass(frozen=True)
class Topology:
  """One slice shape, and the ``get_topology_desc`` arguments that build it."""
  name: str                       # as given, e.g. "v5e-256"
  chip: Chip
  shape: tuple[int, ...]          # chips along each ICI dimension
  wrap: tuple[bool, bool, bool]
  chips_per_host_bounds: tuple[int, int, int]
  num_slices: int = 1

  @property
  def num_chips(self) -> int:
    """Chips (= JAX devices) over all slices."""
    return math.prod(self.shape) * self.num_slices

  @property
  def topology_name(self) -> str:
    return f"{self.chip.libtpu_prefix}:{'x'.join(map(str, self.shape))}"

  def desc_kwargs(self) -> dict:
    return dict(platform="tpu", topology_name=self.topology_name,
                chip_config_name=self.chip.chip_config_name,
                chips_per_host_bounds=self.chips_per_host_bounds,
                num_slices=self.num_slices, wrap=self.wrap)


def _bad(name: str) -> ValueError:
  return ValueError(f"Unknown TPU topology {name!r}; use {VALID_FORMS}.")


def _cubes(chips: int) -> tuple[int, int, int]:
  """A v4/v5p slice of whole 4x4x4 cubes: the most cube-like ``4a x 4b x 4c``.

  Minimises the longest side, then the middle one: 192 chips -> 4x4x12,
  384 -> 4x8x12, 1280 -> 8x8x20 (MaxText's table agrees on every entry).
  """
  k = chips // 64
  best = min(((a, b, k // (a * b)) for a in range(1, k + 1) if k % a == 0
              for b in range(a, k + 1) if (k // a) % b == 0
              and b <= k // (a * b)), key=lambda t: (t[2], t[1]))
  return tuple(4 * d for d in best)


def _from_shape(name: str, chip_: Chip, shape: tuple[int, ...],
                num_slices: int) -> Topology:
  chips = math.prod(shape)
  if chip_.dims == 2:
    if len(shape) != 2:
      raise _bad(name)
    shape3 = shape + (1,)
    wrap = tuple(s == 16 for s in shape3)  # only a full 16-chip side is a ring
  else:
    if len(shape) != 3:
      raise _bad(name)
    shape3 = shape
    wrap = (chips >= 64 and all(s % 4 == 0 for s in shape),) * 3
  bounds = (1, 1, 1) if chips == 1 else (2, 2, 1)
  return Topology(name, chip_, tuple(shape), wrap, bounds, num_slices)


def parse(name: str) -> Topology:
  """``"v5e-256"`` -> its :class:`Topology`; bad names raise one-line ValueError."""
  text = name.strip().lower()
  m = re.fullmatch(r"(?:(\d+)x)?([a-z0-9]+?)(?:-(\d+)|:(\d+(?:x\d+)+))", text)
  if not m:
    raise _bad(name)
  slices, gen, count, dims = m.groups()
  gen = _ALIASES.get(gen, gen)
  if gen not in CHIPS or (slices is not None and int(slices) < 1):
    raise _bad(name)
  chip_ = CHIPS[gen]
  num_slices = int(slices or 1)
  if dims is not None:
    return _from_shape(name, chip_, tuple(int(d) for d in dims.split("x")),
                       num_slices)
  n = int(count)
  if n % chip_.cores_per_chip:
    raise _bad(name)
  chips = n // chip_.cores_per_chip
  if chip_.dims == 2:
    shape = _SHAPES_2D.get(chips)
  elif chips in _SMALL_SHAPES_3D:
    shape = _SMALL_SHAPES_3D[chips]
  else:
    shape = _cubes(chips) if chips >= 64 and chips % 64 == 0 else None
  if shape is None:
    raise _bad(name)
  return _from_shape(name, chip_, shape, num_slices)


def chip(name: str) -> Chip:
  """The chip of a topology (``"v4-32"``), a generation (``"v5e"``) or a
  ``jax.Device.device_kind`` (``"TPU v5 lite"``); one-line ValueError for
  anything else."""
  key = _ALIASES.get(name.strip().lower(), name.strip().lower())
  if key in CHIPS:
    return CHIPS[key]
  for c in CHIPS.values():
    if name in c.device_kinds:
      return c
  return parse(name).chip


def abstract_devices(name: str) -> Sequence:
  """The devices of topology ``name``, for AOT compilation on any host.

  Needs libtpu (the ``tpu-aot`` extra) but no TPU. Run with
  ``JAX_PLATFORMS=cpu`` so that jax does not look for real TPUs.
  """
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  topo = parse(name)
  # libtpu takes a machine-wide lock meant for processes that drive real
  # chips; compiling only needs the compiler, so several compiling processes
  # (tests, other jobs) may share the host. Workers default to this host.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
  return topologies.get_topology_desc(**topo.desc_kwargs()).devices
