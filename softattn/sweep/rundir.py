"""Reading one run's directory: its status, metrics and the sweep's records.

The training loop owns ``status.json`` (a ``softattn.runstate.Status``),
``metrics.jsonl`` and ``config.json`` (see ``softattn.train``); the sweep runner adds two files of its own next to
them: ``sweep.log`` (the run's stdout and stderr, appended per attempt) and
``sweep_attempt.json`` (how the last attempt ended, and while it runs the
child's host and pid, see ``softattn.sweep.liveness``). From these the runner
decides what to (re)run and the report says what happened to every run.
Every file goes through ``softattn.paths``, so a run directory may be local or
on ``gs://``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from softattn import paths, runstate
from softattn.sweep import liveness

STATUS = runstate.FILENAME
METRICS = "metrics.jsonl"
CONFIG = "config.json"
LOG = "sweep.log"
ATTEMPT = "sweep_attempt.json"
MANIFEST = "sweep.json"  # in the sweep directory, one level up


def read_json(path: str) -> dict | None:
  """The JSON object in ``path``; None if missing or torn by a kill."""
  try:
    return paths.read_json(path)
  except json.JSONDecodeError:
    return None


def write_json(path: str, obj: Any) -> None:
  """Writes atomically so a kill never leaves half a file behind."""
  paths.write_json(path, obj, default=repr)  # keeps declaration order


def read_metrics(run_dir: str) -> list[dict]:
  """Every record of ``metrics.jsonl``; a line that does not parse (a write
  torn by a kill or a full disk) is skipped with a
  ``paths.UnparsableLinesWarning`` naming its file and line."""
  return paths.read_json_lines(paths.join(run_dir, METRICS))


def log_tail(run_dir: str, lines: int = 1) -> str:
  """The last non-empty lines of the run's log (usually the exception)."""
  raw = paths.read_log(paths.join(run_dir, LOG))
  text = [l.rstrip() for l in raw.decode("utf-8", errors="replace")
          .splitlines()[-200:] if l.strip()]
  return " | ".join(text[-lines:])


@dataclasses.dataclass(frozen=True)
class RunState:
  """What a run directory says about its run.

  ``state`` is a ``runstate.State``: ``done``; ``failed`` with its ``kind``
  (the loop's ``nonfinite``/``config``/``error``, or ``exit`` when the
  process died without writing a failure); ``preempted`` (stopped by SIGTERM
  or Ctrl-C, or by the sweep runner) or ``running`` (the last word of a run
  that may since have died), both ``resumable``; or ``not_started``.
  ``live``: ``running`` and its recorded child is still alive (a runner
  killed with SIGKILL leaves it training), so not ``resumable``: starting it
  again would put two trainers in one directory.
  ``reason`` is one line for people (tables, logs), never parsed; ``record``
  the run's ``status.json`` (None if it wrote none), ``attempt`` the sweep
  runner's record of its last attempt.
  """
  state: runstate.State
  reason: str | None
  record: runstate.Status | None
  attempt: dict | None
  kind: runstate.FailureKind | None = None
  live: bool = False

  @property
  def step(self) -> int | None:
    return self.record.step if self.record is not None else None

  @property
  def resumable(self) -> bool:
    return not self.live and self.state in (runstate.State.RUNNING,
                                            runstate.State.PREEMPTED)

  @property
  def status(self) -> dict | None:
    """``record`` as a JSON dict, for readers that predate ``runstate``."""
    return self.record.to_json() if self.record is not None else None


def read_status(run_dir: str) -> runstate.Status | None:
  """The run's ``status.json``; None if missing or not a ``runstate.Status``."""
  try:
    return runstate.read(run_dir)
  except (json.JSONDecodeError, ValueError, TypeError):
    return None


def run_state(run_dir: str) -> RunState:
  """Classifies a run directory (see ``RunState``) from its records' fields."""
  State, Kind = runstate.State, runstate.FailureKind  # pylint: disable=invalid-name
  record = read_status(run_dir)
  attempt = read_json(paths.join(run_dir, ATTEMPT))
  if record is not None and record.state == State.DONE:
    return RunState(State.DONE, None, record, attempt)
  if record is not None and record.state == State.FAILED:
    return RunState(State.FAILED, record.message or "failed (no message)",
                    record, attempt, kind=record.kind or Kind.ERROR)
  stopped = attempt is not None and attempt.get("interrupted")
  returncode = (attempt or {}).get("returncode")
  if attempt is not None and not stopped and returncode not in (None, 0):
    tail = log_tail(run_dir) or "no output"
    return RunState(State.FAILED, f"exit code {returncode}: {tail}",
                    record, attempt, kind=Kind.EXIT)
  if attempt is not None and returncode == 0 and record is None:
    return RunState(State.FAILED, "exited 0 without writing status.json",
                    record, attempt, kind=Kind.EXIT)
  if record is None and attempt is None:
    return RunState(State.NOT_STARTED, "never started", None, None)
  # An open attempt (no exit recorded) whose child lives: its runner died.
  alive = attempt is not None and not stopped and returncode is None and \
      liveness.check(attempt, run_dir)
  if alive:
    return RunState(State.RUNNING, alive, record, attempt, live=True)
  preempted = stopped or (record is not None and record.state == State.PREEMPTED)
  step = record.step if record is not None else None
  where = f" at step {step}" if step is not None else ""
  if preempted:
    return RunState(State.PREEMPTED, f"stopped{where}; `sweep run` resumes it",
                    record, attempt)
  return RunState(State.RUNNING, f"running or stopped{where}; `sweep run` "
                  "resumes it", record, attempt)


def is_finite_number(x: Any) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool) \
      and math.isfinite(x)
