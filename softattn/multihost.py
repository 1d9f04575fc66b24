"""Joining a multi-process run: ``initialize`` before anything touches JAX.

One process per host; each sees its local devices, and ``jax.devices()`` lists
all of them. The loop needs nothing else: batches are global ``jax.Array``s
built from each process's slice (``softattn.data``), only process 0 writes
metrics and ``status.json``, and every process writes its own shards of an
Orbax checkpoint into the shared workdir.

Where the coordinates come from:

* TPU pods, SLURM, Open MPI, Kubernetes: nothing to pass;
  ``jax.distributed.initialize()`` detects them (``jax._src.clusters``).
* Anywhere else, e.g. several processes on one machine: pass all three of
  ``coordinator_address`` (``host:port`` of process 0; jax also reads
  ``JAX_COORDINATOR_ADDRESS``), ``num_processes`` and ``process_id``
  (``python -m softattn.main --coordinator_address=... --num_processes=...
  --process_id=...``).

A loopback coordinator (``127.0.0.1``, ``localhost``, ``::1``) means every
process is on this machine: the coordination service and the CPU collectives
(gloo, jax's default on CPU) then listen on the loopback interface only,
instead of jax's defaults (all interfaces; the address the host name
resolves to). Inferred choice: a rehearsal on one machine should not open
ports to the network.
"""

from __future__ import annotations

import ipaddress
import os

import jax
from jax._src import xla_bridge  # backends_are_initialized; no public API

LOOPBACK_HOST = "127.0.0.1"


class MultihostError(ValueError):
  """Coordinates given partially or inconsistently; the message names the fix."""


def _host(address: str) -> str:
  host = address.rsplit(":", 1)[0] if ":" in address else address
  return host.strip("[]")


def is_loopback(address: str) -> bool:
  """Whether ``host:port`` names this machine's loopback interface."""
  host = _host(address)
  if host == "localhost":
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def _pin_cpu_collectives(host: str) -> None:
  """Makes jax's gloo CPU collectives bind to ``host`` (jax has no option for it).

  jax builds gloo with the host name's address; this re-registers the CPU
  backend factory with the same gloo collectives given ``hostname=host``.
  Must run before the backend exists (``initialize`` checks that first).
  """
  # pylint: disable=g-import-not-at-top
  from jax._src import distributed as jax_distributed
  from jax._src.lib import _jax

  def make_cpu_client():
    collectives = None
    if jax.config.jax_cpu_collectives_implementation in (None, "gloo"):
      collectives = _jax.make_gloo_tcp_collectives(
          distributed_client=jax_distributed.global_state.client,
          hostname=host)
    return xla_bridge.make_cpu_client(collectives)
  xla_bridge.register_backend_factory("cpu", make_cpu_client, priority=0,
                                      fail_quietly=False)


def initialize(coordinator_address: str | None = None,
               num_processes: int | None = None,
               process_id: int | None = None) -> None:
  """``jax.distributed.initialize`` with explicit or auto-detected coordinates.

  Call it first: after any JAX computation (even ``jax.devices()``) jax
  refuses to join. Raises ``MultihostError`` when only some of
  ``num_processes``/``process_id`` are given or they disagree.
  """
  given = {"num_processes": num_processes, "process_id": process_id}
  if any(v is not None for v in given.values()):
    missing = [k for k, v in given.items() if v is None]
    if missing or coordinator_address is None and not _env_address():
      raise MultihostError(
          "set --coordinator_address (or JAX_COORDINATOR_ADDRESS), "
          "--num_processes and --process_id together, or none of them on a "
          f"cluster jax detects (missing: {missing or ['coordinator_address']})")
    if not 0 <= process_id < num_processes:
      raise MultihostError(
          f"--process_id={process_id} must be in [0, {num_processes}) for "
          f"--num_processes={num_processes}")
  if xla_bridge.backends_are_initialized():
    raise RuntimeError("softattn.multihost.initialize() must run before any "
                       "JAX computation (jax.devices() included)")
  address = coordinator_address or _env_address()
  kwargs = {}
  if address and is_loopback(address):
    kwargs["coordinator_bind_address"] = address
    _pin_cpu_collectives(LOOPBACK_HOST)
  jax.distributed.initialize(coordinator_address, num_processes, process_id,
                             **kwargs)


def _env_address() -> str | None:
  return os.environ.get("JAX_COORDINATOR_ADDRESS") or None
