"""Whether a run's recorded child process is still alive.

The sweep runner starts each run in a session of its own (so a terminal's
Ctrl-C reaches only the runner), so a runner killed with SIGKILL, or by the
OOM killer, leaves its runs training. To keep the next ``sweep run`` from
starting a second trainer into the same directory, the runner records the
child in the run's ``sweep_attempt.json`` when it starts it (``identify``):
``host``, ``pid``, ``proc_start`` (the process's start time, field 22 of
``/proc/<pid>/stat``, in clock ticks since boot) and ``boot_id``. A pid alone
is not enough: the kernel reuses pids, and the start time of a reused pid
differs; a reboot resets both, which the boot id tells.

``check`` answers for a record:

* from this host (same host name): alive iff the pid exists, is not a zombie
  and has the recorded start time and boot id. Without ``/proc`` (macOS) the
  pid alone is trusted, so a reused pid reads as alive until it exits;
* from another host, whose pids cannot be seen from here: alive while the
  run's ``status.json`` (rewritten by the loop at every log, checkpoint and
  eval step), or else the attempt's start, is younger than ``FOREIGN_STALE_S``.
  A run on another host that writes less often than that can be started
  twice; the training loop's own workdir lease is the guard for that case.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from softattn import paths, runstate

FOREIGN_STALE_S = 30 * 60


def _proc_stat(pid: int) -> tuple[str, int] | None:
  """``(state, start time)`` from ``/proc/<pid>/stat``; None if no process."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      raw = f.read()
  except (FileNotFoundError, ProcessLookupError):
    return None
  # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
  fields = raw.rpartition(")")[2].split()
  return fields[0], int(fields[19])  # fields 3 and 22, counted from 1


def _boot_id() -> str | None:
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      return f.read().strip()
  except OSError:
    return None


def _has_proc() -> bool:
  return os.path.exists(f"/proc/{os.getpid()}/stat")


def identify(pid: int) -> dict[str, Any]:
  """The record of a just-started child: host, pid, start time, boot id."""
  stat = _proc_stat(pid) if _has_proc() else None
  return {"host": socket.gethostname(), "pid": pid,
          "proc_start": stat[1] if stat else None, "boot_id": _boot_id()}


def _alive_here(record: dict[str, Any]) -> bool:
  pid = record["pid"]
  if record.get("boot_id") and record["boot_id"] != _boot_id():
    return False  # this machine rebooted since
  if _has_proc():
    stat = _proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):  # gone, or dead awaiting reaping
      return False
    return record.get("proc_start") in (None, stat[1])
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    pass  # exists, someone else's
  return True


def check(record: dict[str, Any], run_dir: str) -> str | None:
  """One line saying where the recorded child runs, or None if it is gone.

  ``record``: the runner's attempt record, with the keys of ``identify``
  (an attempt without a ``pid``, from before this record existed, is None).
  """
  pid, host = record.get("pid"), record.get("host")
  if pid is None or host is None:
    return None
  if host == socket.gethostname():
    if not _alive_here(record):
      return None
    since = time.strftime("%m-%d %H:%M",
                          time.localtime(record.get("started", 0)))
    return (f"running as pid {pid} on this host since {since}, started by "
            f"another `sweep run`; `kill -TERM -{pid}` stops it, then "
            "`sweep run` resumes it")
  try:
    last = paths.mtime(paths.join(run_dir, runstate.FILENAME))
  except FileNotFoundError:  # still compiling, or never got that far
    last = record.get("started", 0)
  age = time.time() - last
  if age > FOREIGN_STALE_S:
    return None
  return (f"running elsewhere (host {host}, pid {pid}): its status was "
          f"written {age / 60:.0f} min ago; taken as running until "
          f"{FOREIGN_STALE_S // 60} min pass without a write")
