"""Reading one run's directory: its status, metrics and the sweep's records.

The training loop owns ``status.json``, ``metrics.jsonl`` and ``config.json``
(see ``softattn.train``); the sweep runner adds two files of its own next to
them: ``sweep.log`` (the run's stdout and stderr, appended per attempt) and
``sweep_attempt.json`` (how the last attempt ended). From these the runner
decides what to (re)run and the report says what happened to every run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

STATUS = "status.json"
METRICS = "metrics.jsonl"
CONFIG = "config.json"
LOG = "sweep.log"
ATTEMPT = "sweep_attempt.json"
MANIFEST = "sweep.json"  # in the sweep directory, one level up


def read_json(path: str) -> dict | None:
  """The JSON object in ``path``; None if missing or torn by a kill."""
  try:
    with open(path) as f:
      return json.load(f)
  except FileNotFoundError:
    return None
  except json.JSONDecodeError:
    return None


def write_json(path: str, obj: Any) -> None:
  """Writes atomically so a kill never leaves half a file behind."""
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=1, default=repr)  # keeps declaration order
  os.replace(tmp, path)


def read_metrics(run_dir: str) -> list[dict]:
  """Every record of ``metrics.jsonl``; a torn last line (kill) is skipped."""
  out = []
  try:
    with open(os.path.join(run_dir, METRICS)) as f:
      for line in f:
        line = line.strip()
        if not line:
          continue
        try:
          out.append(json.loads(line))
        except json.JSONDecodeError:
          continue
  except FileNotFoundError:
    pass
  return out


def log_tail(run_dir: str, lines: int = 1) -> str:
  """The last non-empty lines of the run's log (usually the exception)."""
  try:
    with open(os.path.join(run_dir, LOG), errors="replace") as f:
      text = [l.rstrip() for l in f.readlines()[-200:] if l.strip()]
  except FileNotFoundError:
    return ""
  return " | ".join(text[-lines:])


@dataclasses.dataclass(frozen=True)
class RunState:
  """What a run directory says about its run.

  ``state`` is one of ``done``, ``failed`` (the loop reported a failure, or the
  process died on its own), ``interrupted`` (stopped from outside, or a
  ``running`` status with no live process: a rerun resumes it) or
  ``not started``.
  """
  state: str
  reason: str | None
  status: dict | None
  attempt: dict | None


def run_state(run_dir: str) -> RunState:
  """Classifies a run directory (see ``RunState``)."""
  status = read_json(os.path.join(run_dir, STATUS))
  attempt = read_json(os.path.join(run_dir, ATTEMPT))
  if status is not None and status.get("status") == "done":
    return RunState("done", None, status, attempt)
  if status is not None and status.get("status") == "failed" and not str(
      status.get("reason") or "").startswith("interrupted"):
    # The loop marks a Ctrl-C'd run "failed: interrupted (...)"; that run is
    # resumable, so it falls through to "interrupted" below.
    return RunState("failed", status.get("reason") or "failed (no reason given)",
                    status, attempt)
  if attempt is not None and not attempt.get("interrupted") \
      and attempt.get("returncode") not in (None, 0):
    tail = log_tail(run_dir) or "no output"
    return RunState("failed", f"exit code {attempt['returncode']}: {tail}",
                    status, attempt)
  if attempt is not None and attempt.get("returncode") == 0 and status is None:
    return RunState("failed", "exited 0 without writing status.json",
                    status, attempt)
  if status is not None or attempt is not None:
    step = (status or {}).get("step")
    where = f" at step {step}" if step is not None else ""
    return RunState("interrupted", f"stopped{where}; `sweep run` resumes it",
                    status, attempt)
  return RunState("not started", "never started", None, None)


def is_finite_number(x: Any) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool) \
      and math.isfinite(x)
