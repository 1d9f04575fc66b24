"""Which backends jax may start, settled before it starts: no libtpu noise.

jax tries every backend it knows the first time it needs one, the TPU
included whenever libtpu is installed (the ``test`` and ``tpu-aot`` extras
install it, for the AOT compiles). On a host without a TPU, libtpu's start-up
then prints "Failed to find host bounds ...", an ``E0000 ... common_lib.cc``
line and a "Source Location Trace" before jax falls back to the CPU, so every
command's one-line error comes wrapped in five lines that look like a crash.

``quiet_start()`` runs first thing in ``softattn/__init__.py``, so before any
``python -m softattn.<cli>`` (or a sweep's child run) imports jax, and decides
from device files only (no library is loaded):

* a TPU may be here (``/dev/accel*``, ``/dev/vfio/<n>``, a Google PCI
  device, where jax itself looks), ``JAX_FORCE_TPU_INIT`` is set, or libtpu
  is not installed: nothing changes.
* otherwise libtpu is told that this process is one host of one worker
  (``TPU_WORKER_HOSTNAMES``, ``TPU_HOST_BOUNDS``, unless already set), so a
  probe of it fails quietly (jax logs "No jellyfish device found" at INFO);
  and when the user set no ``JAX_PLATFORMS`` (an empty one counts as set),
  no other jax plugin is installed (CUDA, ROCm, ...) and jax is not imported
  yet, ``JAX_PLATFORMS=cpu``: libtpu is not even loaded, nor its machine-wide
  lock taken. With a plugin (a GPU host) jax still picks the GPU.

The AOT compiles for abstract TPU topologies (``softattn.topology``,
``softattn.aot``, ``softattn.pallas.tpu.aot``) load libtpu's compiler whatever
``JAX_PLATFORMS`` says (``jax.experimental.topologies``), so they run as
before; ``TPU_HOST_BOUNDS=1,1,1`` also silences the "host bounds" line they
printed, and changes nothing they compile: the topology is given explicitly
(the devices of v5e-16, v4-32 and 2xv5e-16, and a v5e-16 train step's
report, came out identical with and without it).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys

# What jax's own check reads (jax._src.hardware_utils): Google's PCI vendor.
_GOOGLE_PCI_VENDOR = "0x1ae0"
# libtpu's view of a host that is not part of a slice: itself, one host.
QUIET_TPU_ENV = {"TPU_WORKER_HOSTNAMES": "localhost",
                 "TPU_HOST_BOUNDS": "1,1,1"}


def tpu_here() -> bool:
  """Whether this host may have a TPU: its device files or a Google PCI device.

  Errs towards yes (a ``/dev/vfio`` group of any passthrough device counts):
  a wrong yes only keeps jax's default, a wrong no would hide a TPU.
  """
  if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
    return True
  for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
    try:
      with open(vendor, encoding="ascii") as f:
        if f.read().strip() == _GOOGLE_PCI_VENDOR:
          return True
    except OSError:
      continue
  return False


def _libtpu_installed() -> bool:
  return importlib.util.find_spec("libtpu") is not None


def _jax_plugin_installed() -> bool:
  """A PJRT plugin jax would discover (CUDA, ROCm, ...): other than the CPU."""
  if os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS"):
    return True
  if importlib.util.find_spec("jax_plugins") is not None:
    return True
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  return bool(metadata.entry_points(group="jax_plugins"))


def quiet_start() -> None:
  """Keeps libtpu's start-up errors off a host without a TPU (see module doc).

  Sets environment variables only where unset; inherited by child processes,
  which decide the same. Cheap: a few file-system checks, no import of jax.
  """
  if "JAX_FORCE_TPU_INIT" in os.environ:
    return  # a TPU this module cannot see: the user says it is there
  if not _libtpu_installed() or tpu_here():
    return
  # True of this host whatever the platforms: the AOT compiles load libtpu
  # under JAX_PLATFORMS=cpu too.
  for name, value in QUIET_TPU_ENV.items():
    os.environ.setdefault(name, value)
  # The user's JAX_PLATFORMS (even empty) wins; jax reads it once, on import.
  if "JAX_PLATFORMS" not in os.environ and "jax" not in sys.modules \
      and not _jax_plugin_installed():
    os.environ["JAX_PLATFORMS"] = "cpu"
