"""Orbax checkpoints of the train state: save, seal, restore the newest good one.

A thin layer over ``orbax.checkpoint.CheckpointManager``: one item (the whole
train state pytree: step, params, batch stats, optimizer state, EMA) saved
under ``<workdir>/checkpoints/<step>``. Saves are asynchronous (the loop keeps
training while the arrays are written); Orbax writes to a temporary directory
and renames it when complete, so a run killed mid-save leaves the previous
checkpoint as the latest one.

What Orbax does not do, and a preemptible job needs:

* **Sealing.** Orbax's array files carry no checksum: a bit flipped in a data
  file restores silently as a different number (seen with the OCDBT files of
  orbax 0.12). Once a save is complete, ``<step>/digests.json``
  (``softattn.ckpt_digest``) records every file's size and digest, and a
  restore checks them first.
* **Walking back.** ``restore_newest`` tries the newest step; a damaged one
  (a digest that does not match, a truncated or missing file, no metadata,
  an empty folder) is named in one line, moved aside to
  ``checkpoints/<step>.damaged`` (never deleted) and the previous step is
  tried. If none restores, every folder is put back as it was and
  ``NoGoodCheckpoint`` names every step with its reason.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from typing import Any, Callable

import orbax.checkpoint as ocp

from softattn import ckpt_digest, paths

DAMAGED = ".damaged"


class NoGoodCheckpoint(paths.PathError):
  """Checkpoints exist but none restores (one line naming each and why)."""


@dataclasses.dataclass(frozen=True)
class Damaged:
  """A checkpoint that did not restore, and where it was moved (if it was)."""
  step: int
  reason: str
  moved_to: str | None = None


class Checkpointer:
  """Save every ``every`` steps and at the end, keep ``keep``, restore newest good."""

  def __init__(self, directory: str, *, every: int, keep: int | None,
               asynchronous: bool = True, is_main: bool = True):
    self.directory = os.fspath(paths.path(directory))  # local or gs://
    self.every = max(int(every or 0), 0)
    self.is_main = is_main  # only process 0 writes digests
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep or None, create=True,
        enable_async_checkpointing=asynchronous,
        # Leftovers of a save interrupted by a kill are removed on start.
        cleanup_tmp_directories=True)
    self.options = options
    self.manager = ocp.CheckpointManager(self.directory, options=options)
    self.asynchronous = asynchronous
    # The newest step known complete (an asynchronous save is not, until
    # ``wait``): what status.json may report as saved.
    self.committed: int | None = self.manager.latest_step()

  def _step_dir(self, step: int) -> str:
    return paths.join(self.directory, str(step))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def should_save(self, step: int) -> bool:
    return bool(self.every) and step % self.every == 0

  def save(self, step: int, state: Any) -> None:
    """Starts saving ``step`` (a no-op if it exists); seals earlier saves."""
    # Orbax waits for the previous save before starting one anyway; waiting
    # here first lets that save be sealed while its files are fresh.
    self.wait()
    if step in self.manager.all_steps():
      return
    self.manager.save(step, args=ocp.args.StandardSave(state), force=True)
    if not self.asynchronous:
      self.committed = step

  def saved_step(self) -> int | None:
    """The newest step whose save is complete on disk or in the bucket."""
    self.wait()
    return self.latest_step()

  def _seal(self) -> None:
    """Writes the digests of every complete step that has none yet."""
    if not self.is_main:
      return
    for step in self.all_steps():
      if not ckpt_digest.is_sealed(self._step_dir(step)):
        ckpt_digest.seal(self._step_dir(step))

  def restore(self, abstract_state: Any, step: int | None = None) -> Any:
    """The state at ``step`` (default: latest) placed with ``abstract_state``'s shardings.

    ``abstract_state`` is a pytree of ``jax.ShapeDtypeStruct`` with
    ``sharding`` set, so every array comes back directly sharded. Raises
    ``ckpt_digest.DigestMismatch`` when a sealed step's files changed.
    """
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"No checkpoint in {self.directory}.")
    ckpt_digest.verify(self._step_dir(step))
    return self.manager.restore(step, args=ocp.args.StandardRestore(abstract_state))

  def restore_newest(self, abstract_state: Any, say: Callable[[str], None]
                     ) -> tuple[Any, int, list[Damaged]]:
    """``(state, step, damaged)``: the newest checkpoint that restores.

    Each damaged newer step is reported through ``say`` in one line and moved
    aside to ``<step>.damaged`` before the one before it is tried (a broken
    step folder misleads Orbax's reading of the others). Raises
    ``NoGoodCheckpoint`` when no step restores, after moving every one back.
    """
    damaged: list[Damaged] = []
    for step in reversed(self.all_steps()):
      try:
        state = self.restore(abstract_state, step)
      except Exception as e:  # pylint: disable=broad-except
        reason = _reason(e)
        say(f"checkpoint {step} in {self.directory} is damaged ({reason}); "
            "moving it aside and trying the one before it")
        damaged.append(Damaged(step, reason, self._move_aside(step)))
        self._reopen()
        continue
      return state, step, damaged
    for d in damaged:  # nothing restores: leave the folders as they were
      if d.moved_to:
        _move(d.moved_to, self._step_dir(d.step))
    self._reopen()
    raise NoGoodCheckpoint(
        f"no checkpoint in {self.directory} restores: " + "; ".join(
            f"{d.step}: {d.reason}" for d in damaged) + ". Move them aside "
        "(or use a new workdir) to start afresh")

  def _reopen(self) -> None:
    """A fresh manager: Orbax caches the step list and what a step holds."""
    self.manager.close()
    self.manager = ocp.CheckpointManager(self.directory, options=self.options)

  def _move_aside(self, step: int) -> str | None:
    """Renames ``<step>`` to ``<step>.damaged`` (``.damaged-2``, ... if taken)."""
    if not self.is_main:
      return None
    src = self._step_dir(step)
    existing = set(paths.listdir(self.directory))
    name, k = f"{step}{DAMAGED}", 1
    while name in existing:
      k += 1
      name = f"{step}{DAMAGED}-{k}"
    try:
      _move(src, paths.join(self.directory, name))
    except OSError:
      return None
    return paths.join(self.directory, name)

  def wait(self) -> None:
    """Waits for a save in flight, then seals it."""
    self.manager.wait_until_finished()
    self.committed = self.latest_step()
    self._seal()

  def close(self) -> None:
    self.wait()
    self.manager.close()


def _move(src: str, dst: str) -> None:
  """Renames a folder; on a bucket (no rename there) copies, then deletes."""
  if paths.is_remote(src):
    fs, rsrc = paths._fs(src)  # pylint: disable=protected-access
    fs.mv(rsrc, paths._fs(dst)[1], recursive=True)  # pylint: disable=protected-access
  else:
    os.rename(src, dst)


def _reason(e: BaseException) -> str:
  """A short cause for a failed restore (tensorstore's specs run to KBs)."""
  text = " ".join(str(e).split())
  for cut in (" See full TensorStore details", " [source locations", "{"):
    if cut in text:
      text = text[:text.index(cut)]
  return f"{type(e).__name__}: {text[:200].rstrip(' :.,')}"


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
