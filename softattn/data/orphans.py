"""Pool workers that do not outlive their parent, even one killed by SIGKILL.

A ``ProcessPoolExecutor`` worker waits for work on a queue whose pipe it
holds both ends of (a queue travels to a spawned worker whole), so it never
sees end-of-file: a parent that dies without shutting its pool down
(``kill -9``, the OOM killer) leaves every worker waiting forever, ~1 GiB
each in ``prepare imagenet21k``. The multiprocessing resource tracker stays
with them, as the workers hold its pipe too; it exits once they are gone.

``exit_with_parent`` is the pool's worker initializer:

* on Linux the kernel kills the worker when its parent goes
  (``prctl(PR_SET_PDEATHSIG)``). That fires when the parent *thread* that
  started the worker ends, not only the process: ``ProcessPoolExecutor``
  starts its workers from the thread that calls ``submit`` (or its manager
  thread, to replace one), and ``hashed_shards.run_jobs`` keeps that thread
  inside the pool's ``with`` until every worker has exited;
* elsewhere, or if ``prctl`` fails, a daemon thread checks the parent's pid
  every ``POLL_S`` seconds.

SIGKILL, not a gentler signal: a worker holds nothing to tidy up, since the
parent writes each resume marker only after the worker's file is complete.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

POLL_S = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _kill_on_parent_death() -> bool:
  """Asks Linux to SIGKILL this process when its parent thread ends."""
  if not sys.platform.startswith("linux"):
    return False
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
  except (OSError, AttributeError):  # no libc prctl (an unusual libc)
    return False


def _poll(parent_pid: int) -> None:
  while os.getppid() == parent_pid:
    time.sleep(POLL_S)
  os._exit(1)  # pylint: disable=protected-access


def exit_with_parent(parent_pid: int) -> None:
  """Worker initializer: this process ends when ``parent_pid`` (its parent,
  ``os.getpid()`` in the parent when it makes the pool) does."""
  watched = _kill_on_parent_death()
  # The parent may have died before the line above: this process was then
  # already handed to another parent, which no death signal will follow.
  if os.getppid() != parent_pid:
    os._exit(1)  # pylint: disable=protected-access
  if not watched:
    threading.Thread(target=_poll, args=(parent_pid,), daemon=True,
                     name="exit_with_parent").start()
