"""A run's state as data: the one enum of states and the ``status.json`` record.

The training loop writes ``status.json`` in its workdir; the sweep runner,
``sweep report`` and the study reports read it. They read *fields*, never
prose: a failure is ``{"state": "failed", "kind": "nonfinite", "step": 40,
"message": "..."}``, so no reader parses a message with a regex.

States (``State``):

* ``running``: the loop is (or was, if the process died) between steps;
* ``preempted``: SIGTERM or Ctrl-C after a saved checkpoint; rerunning the
  same command resumes it;
* ``done``: reached ``total_steps`` and evaluated;
* ``failed``: stopped for a reason a rerun does not fix by itself; ``kind``
  says which (``FailureKind``).

A sweep adds ``not_started`` for runs that never wrote a status.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from typing import Any

from softattn import paths

FILENAME = "status.json"


class State(enum.StrEnum):  # str(), f-strings, JSON: the value
  NOT_STARTED = "not_started"
  RUNNING = "running"
  PREEMPTED = "preempted"
  DONE = "done"
  FAILED = "failed"


class FailureKind(enum.StrEnum):
  NONFINITE = "nonfinite"   # NaN/Inf in the loss or gradients (exit code 3)
  CONFIG = "config"         # ConfigError: the message names the fix (exit 2)
  IO = "io"                 # the workdir could not be written or read (exit 4)
  DAMAGED = "damaged"       # checkpoints exist but none restores (exit 2)
  ERROR = "error"           # any other exception
  EXIT = "exit"             # the process died without saying why (sweep-side)


@dataclasses.dataclass
class Status:
  """The contents of ``status.json``.

  ``step`` is the last completed step (for ``nonfinite``: the step whose loss
  or gradients were not finite). ``flops_per_step`` is XLA's cost analysis of
  the compiled train step; ``core_seconds`` the process CPU time and
  ``wall_seconds`` the elapsed time of the training process, each summed
  over resumes (the gaps between attempts are not counted); ``final`` the
  metrics of a finished run. ``saved_step`` is the newest checkpoint known
  to be complete on disk or in the bucket (what a rerun resumes from);
  ``furthest_step`` the furthest step any attempt reached, kept when a
  damaged checkpoint sends a resume back; ``damaged`` the checkpoints moved
  aside (``checkpoints/<step>.damaged``) with why.
  """
  state: State = State.RUNNING
  step: int = 0
  saved_step: int | None = None
  furthest_step: int = 0
  damaged: list[str] = dataclasses.field(default_factory=list)
  kind: FailureKind | None = None
  message: str | None = None
  flops_per_step: float | None = None
  core_seconds: float = 0.0
  wall_seconds: float = 0.0
  final: dict[str, Any] = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["state"] = State(self.state).value
    d["kind"] = FailureKind(self.kind).value if self.kind else None
    return d

  @classmethod
  def from_json(cls, d: dict[str, Any]) -> "Status":
    known = {f.name for f in dataclasses.fields(cls)}
    d = {k: v for k, v in d.items() if k in known}
    d["state"] = State(d.get("state", State.RUNNING))
    d["kind"] = FailureKind(d["kind"]) if d.get("kind") else None
    return cls(**d)

  @property
  def resumable(self) -> bool:
    """A rerun of the same command continues this run."""
    return self.state in (State.RUNNING, State.PREEMPTED)


def read(workdir: str) -> Status | None:
  """The run's status, or ``None`` when it never wrote one."""
  record = paths.read_json(paths.join(workdir, FILENAME))
  return None if record is None else Status.from_json(record)


def write(workdir: str, status: Status) -> None:
  """Writes ``status.json`` atomically (readers never see half a file).

  ``paths.write_atomic``: a renamed temporary file locally; on a bucket one
  whole-object upload, which GCS makes atomic (there is no rename there).
  """
  paths.write_json(paths.join(workdir, FILENAME), status.to_json(), default=str)


class Recorder:
  """The training loop's ``status.json``: updated in place, written atomically.

  ``enabled=False`` (processes other than 0) keeps the record without
  writing it. ``core_seconds`` (``wall_seconds``) is this process's CPU
  (elapsed) time plus that of the earlier attempts recorded in the workdir,
  so compute comparisons (core-hours) and a study's cost see the whole run
  across resumes, and an interrupted run need not be restarted to be timed.
  """

  def __init__(self, workdir: str, *, enabled: bool = True):
    self.workdir, self.enabled = workdir, enabled
    prior = read(workdir) or Status()
    self.prior = prior
    self.t0, self.wall0 = time.process_time(), time.monotonic()
    self.status = Status(state=State.RUNNING, step=0,
                         saved_step=prior.saved_step,
                         furthest_step=prior.furthest_step,
                         damaged=list(prior.damaged),
                         flops_per_step=prior.flops_per_step,
                         core_seconds=prior.core_seconds,
                         wall_seconds=prior.wall_seconds)

  def update(self, **fields) -> None:
    """Sets ``Status`` fields, refreshes the times and writes."""
    furthest = max(self.status.furthest_step, int(fields.get(
        "step", self.status.step) or 0))
    self.status = dataclasses.replace(
        self.status, **fields, furthest_step=furthest,
        core_seconds=self.prior.core_seconds + time.process_time() - self.t0,
        wall_seconds=self.prior.wall_seconds + time.monotonic() - self.wall0)
    if self.enabled:
      write(self.workdir, self.status)

  def failed(self, kind: FailureKind, message: str,
             step: int | None = None) -> None:
    """``failed`` with ``kind``; ``step`` defaults to the last recorded one."""
    self.update(state=State.FAILED, kind=kind, message=message,
                step=self.status.step if step is None else step)
