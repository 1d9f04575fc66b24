"""Orbax checkpoints of the train state, with auto-resume and SIGTERM saving.

A thin layer over ``orbax.checkpoint.CheckpointManager``: one item (the whole
train state pytree: step, params, batch stats, optimizer state, EMA) saved
under ``<workdir>/checkpoints/<step>``. Saves are asynchronous (the loop keeps
training while the arrays are written); Orbax writes to a temporary directory
and renames it when complete, so a run killed mid-save leaves the previous
checkpoint as the latest one.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import orbax.checkpoint as ocp

from softattn import paths


class Checkpointer:
  """Save every ``every`` steps and at the end, keep ``keep``, restore latest."""

  def __init__(self, directory: str, *, every: int, keep: int | None,
               asynchronous: bool = True):
    self.directory = os.fspath(paths.path(directory))  # local or gs://
    self.every = max(int(every or 0), 0)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep or None, create=True,
        enable_async_checkpointing=asynchronous,
        # Leftovers of a save interrupted by a kill are removed on start.
        cleanup_tmp_directories=True)
    self.manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self.manager.all_steps())

  def should_save(self, step: int) -> bool:
    return bool(self.every) and step % self.every == 0

  def save(self, step: int, state: Any) -> None:
    if step in self.manager.all_steps():
      return
    self.manager.save(step, args=ocp.args.StandardSave(state), force=True)

  def restore(self, abstract_state: Any, step: int | None = None) -> Any:
    """The state at ``step`` (default: latest) placed with ``abstract_state``'s shardings.

    ``abstract_state`` is a pytree of ``jax.ShapeDtypeStruct`` with
    ``sharding`` set, so every array comes back directly sharded.
    """
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"No checkpoint in {self.directory}.")
    return self.manager.restore(step, args=ocp.args.StandardRestore(abstract_state))

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()


class PreemptionFlag:
  """Set by SIGTERM (preemption notice); the loop saves and exits when set.

  Installed only in the main thread (signal handlers cannot be set elsewhere,
  e.g. when ``train_and_evaluate`` runs in a notebook worker thread). The
  previous handler is restored by ``uninstall``.
  """

  def __init__(self):
    self._event = threading.Event()
    self._previous = None

  def install(self) -> "PreemptionFlag":
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def _handle(self, signum, frame):
    del signum, frame
    self._event.set()

  def is_set(self) -> bool:
    return self._event.is_set()

  def uninstall(self) -> None:
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
      self._previous = None
