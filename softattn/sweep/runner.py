"""Runs a sweep locally: each run a ``python -m softattn.main`` subprocess.

Runs go one at a time or ``parallel`` at a time. Before starting a run the
runner reads its directory (``softattn.sweep.rundir.run_state``):

* ``done`` runs are skipped, so rerunning a sweep only does what is missing;
* resumable runs (``preempted``, or ``running`` with no process left) are
  started again with the same command, and the training loop resumes from
  its last Orbax checkpoint in the run's workdir;
* ``failed`` runs (NaN, crash) are skipped and keep their reason, unless
  ``retry_failed``: a deterministic divergence would only fail again;
* ``live`` runs, whose recorded child is still alive (``rundir.RunState``),
  are skipped with one line saying where they run, and count as ``running``
  (so ``sweep run`` exits 1). A runner killed with SIGKILL leaves its runs
  training (each is in a session of its own), and a second trainer in the
  same directory would fight the first over its checkpoints. Skipping, not
  waiting: the orphan may have hours left and, not being this runner's
  child, gives it no exit code to collect; once it ends, ``sweep run`` again
  picks up whatever it left (done, failed, or resumable).

Stopping the runner (Ctrl-C, SIGTERM) stops its runs (SIGTERM, then SIGKILL
after ``grace_s``) and marks their attempts interrupted, so the next
``sweep run`` resumes them.

Each child's host, pid and process start time go into its run's
``sweep_attempt.json`` right after it starts (``softattn.sweep.liveness``);
a runner killed in the instant between the two leaves a run that reads as
resumable, as before this record existed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Sequence

from softattn import paths, runstate
from softattn.sweep import declaration
from softattn.sweep import liveness
from softattn.sweep import rundir


def default_launcher() -> list[str]:
  return [sys.executable, "-m", "softattn.main"]


def preflight(sweep: declaration.Sweep, *, mock_data: bool = False) -> None:
  """Runs the training loop's own config checks on every run, here and now.

  ``softattn.configlib.resolve_config`` rejects unknown normalizer/optimizer/loss
  names, batches the device mesh does not divide and datasets that are not
  prepared. Checking all runs before starting any turns a typo in the tenth
  run into an immediate error instead of a failure an hour in. (``launch``
  does not call this: the TPU VM's devices and data are not this machine's.)

  Raises:
    declaration.SweepError: naming the first bad run and the loop's message.
  """
  from softattn import configlib  # pylint: disable=g-import-not-at-top
  context = contextlib.nullcontext()
  if mock_data:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    context = tfds.testing.mock_data(num_examples=1)
  with context:
    for run in sweep.runs:
      try:
        configlib.resolve_config(run.config.copy_and_resolve_references())
      except configlib.ConfigError as e:
        raise declaration.SweepError(f"run {run.name}: {e}") from None


def write_manifest(sweep: declaration.Sweep, workdir: str,
                   launcher: Sequence[str]) -> None:
  """Records the sweep's runs and commands in ``<workdir>/sweep.json``."""
  rundir.write_json(paths.join(workdir, rundir.MANIFEST), {
      "config": sweep.config_flag,
      "runs": [{"name": r.name, "overrides": r.overrides,
                "command": shlex.join([*launcher, *declaration.main_args(
                    sweep, r, workdir)])} for r in sweep.runs],
  })


class _Stop(Exception):
  """SIGTERM, turned into an exception so cleanup runs in the main thread."""


def _raise_stop(signum, frame):
  del signum, frame
  raise _Stop()


def run_sweep(sweep: declaration.Sweep, workdir: str, *, parallel: int = 1,
              retry_failed: bool = False, only: Sequence[str] = (),
              launcher: Sequence[str] | None = None,
              grace_s: float = 30.0, poll_s: float = 0.5,
              log: Callable[[str], None] = print) -> dict[str, str]:
  """Runs every unfinished run of ``sweep`` under ``workdir``.

  Args:
    sweep: a loaded, already checked sweep (``declaration.load``).
    workdir: the sweep directory; run ``r`` lives in ``workdir/r.name``.
    parallel: how many runs at once (each is its own process).
    retry_failed: also rerun runs that failed before.
    only: glob patterns of run names to run (default: all); the manifest
      still lists every run, so the report shows the others as not started.
    launcher: the command prefix (default ``python -m softattn.main``).
    grace_s: how long a stopped run gets to exit before SIGKILL.
    poll_s: how often running processes are polled.
    log: where progress lines go.

  Returns:
    ``{run name: final state}`` (a ``runstate.State``).

  Raises:
    KeyboardInterrupt: the runner was stopped (its runs are stopped too).
  """
  out = run_sweeps([(sweep, workdir)], parallel=parallel,
                   retry_failed=retry_failed, only=only, launcher=launcher,
                   grace_s=grace_s, poll_s=poll_s, log=log)
  return {name: state for (_, name), state in out.items()}


def run_sweeps(jobs: Sequence[tuple[declaration.Sweep, str]], *,
               parallel: int = 1, retry_failed: bool = False,
               only: Sequence[str] = (),
               launcher: Sequence[str] | None = None,
               grace_s: float = 30.0, poll_s: float = 0.5,
               log: Callable[[str], None] = print
               ) -> dict[tuple[str, str], str]:
  """``run_sweep`` over several ``(sweep, workdir)`` jobs from one pool.

  All jobs' unfinished runs share the ``parallel`` slots, in job order: a
  study's parts (one sweep and workdir each) run as one queue, so the last
  run of one part does not leave a core idle while the next part waits.
  ``only``: as ``declaration.select_all``. Returns ``{(workdir, run name):
  final state}``.
  """
  if parallel < 1:
    raise declaration.SweepError(f"parallel={parallel}; use 1 or more.")
  if len({os.fspath(paths.path(w)) for _, w in jobs}) != len(jobs):
    raise declaration.SweepError("two sweeps share a workdir; give each its "
                                 "own --workdir")
  launcher = list(launcher or default_launcher())
  selected = declaration.select_all([sw for sw, _ in jobs], only)
  # Several jobs: name runs by their sweep's folder, since parts reuse names.
  tag = (lambda w: paths.path(w).name + "/") \
      if len(jobs) > 1 else (lambda w: "")

  outcome: dict[tuple[str, str], runstate.State] = {}
  todo = []
  for (sweep, workdir), runs in zip(jobs, selected):
    paths.makedirs(workdir)
    write_manifest(sweep, workdir, launcher)
    for run in runs:
      label = tag(workdir) + run.name
      state = rundir.run_state(paths.join(workdir, run.name))
      if state.state == runstate.State.DONE:
        log(f"skip {label}: done")
        outcome[workdir, run.name] = state.state
      elif state.live:
        log(f"skip {label}: {state.reason}")
        outcome[workdir, run.name] = state.state
      elif state.state == runstate.State.FAILED and not retry_failed:
        log(f"skip {label}: failed before ({state.reason}); "
            "--retry_failed reruns it")
        outcome[workdir, run.name] = state.state
      else:
        if state.resumable:
          log(f"resume {label}: {state.reason}")
        todo.append((sweep, workdir, run))

  active: dict[tuple[str, str], tuple[subprocess.Popen, dict, object]] = {}
  # Signal handlers can only be set from the main thread (not, e.g., from a
  # notebook's worker); elsewhere SIGTERM keeps its default meaning.
  in_main = threading.current_thread() is threading.main_thread()
  previous = signal.signal(signal.SIGTERM, _raise_stop) if in_main else None
  try:
    total = len(todo)
    while todo or active:
      while todo and len(active) < parallel:
        sweep, workdir, run = todo.pop(0)
        run_dir = paths.join(workdir, run.name)
        paths.makedirs(run_dir)
        cmd = [*launcher, *declaration.main_args(sweep, run, workdir)]
        logf = _RunLog(paths.join(run_dir, rundir.LOG))
        logf.log.write(f"\n$ {shlex.join(cmd)}\n")
        logf.log.flush()
        attempt = {"command": shlex.join(cmd), "started": time.time(),
                   "returncode": None, "interrupted": False}
        rundir.write_json(paths.join(run_dir, rundir.ATTEMPT), attempt)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # A session of its own: a terminal Ctrl-C reaches only the runner,
        # which then stops each run the same way (SIGTERM, then SIGKILL).
        proc = subprocess.Popen(cmd, stdout=logf.stdout,
                                stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        attempt.update(liveness.identify(proc.pid))
        rundir.write_json(paths.join(run_dir, rundir.ATTEMPT), attempt)
        logf.started(proc)
        active[workdir, run.name] = (proc, attempt, logf)
        n = total - len(todo)
        log(f"start [{n}/{total}] {tag(workdir)}{run.name} (pid {proc.pid})")
      time.sleep(poll_s)
      for key, (proc, attempt, logf) in list(active.items()):
        if proc.poll() is None:
          continue
        del active[key]
        logf.close()
        workdir, name = key
        attempt = _finish(workdir, name, attempt, proc.returncode,
                          interrupted=False)
        state = rundir.run_state(paths.join(workdir, name))
        outcome[key] = state.state
        took = attempt["ended"] - attempt["started"]
        extra = f": {state.reason}" if state.reason and \
            state.state != runstate.State.DONE else ""
        log(f"{state.state} {tag(workdir)}{name} (exit {proc.returncode}, "
            f"{took:.0f} s){extra}")
  except (KeyboardInterrupt, _Stop):
    log(f"stopping {len(active)} run(s); `sweep run` again resumes them")
    for proc, _, _ in active.values():
      _signal(proc, signal.SIGTERM)
    deadline = time.time() + grace_s
    for (workdir, name), (proc, attempt, logf) in active.items():
      try:
        proc.wait(timeout=max(0.0, deadline - time.time()))
      except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL)
        proc.wait()
      logf.close()
      _finish(workdir, name, attempt, proc.returncode, interrupted=True)
    raise KeyboardInterrupt() from None
  finally:
    if in_main:
      signal.signal(signal.SIGTERM, previous)
  return outcome


class _RunLog:
  """A run's ``sweep.log``: the child's stdout and stderr, appended.

  Locally the child writes to the file itself (it outlives the runner, as
  before). A bucket has no append and no file handle to give a child: the
  runner pipes the output into a ``paths.AppendLog`` from a thread,
  uploading every ``every_s`` seconds and at the end.
  """

  def __init__(self, path: str, every_s: float = 5.0):
    self.log = paths.AppendLog(path)
    self.every_s = every_s
    self._thread = None
    self.stdout = subprocess.PIPE if self.log.remote else self.log.file

  def started(self, proc: subprocess.Popen) -> None:
    if self.log.remote:
      self._thread = threading.Thread(target=self._pump, args=(proc.stdout,),
                                      daemon=True)
      self._thread.start()

  def _pump(self, pipe) -> None:
    last = time.monotonic()
    for line in iter(pipe.readline, b""):
      self.log.write(line)
      if time.monotonic() - last > self.every_s:
        self.log.flush()
        last = time.monotonic()

  def close(self) -> None:
    """After the child exited: the rest of its output, then the file."""
    if self._thread is not None:
      self._thread.join()
    self.log.close()


def _signal(proc: subprocess.Popen, sig: int) -> None:
  try:
    os.killpg(proc.pid, sig)  # the run and anything it started
  except ProcessLookupError:
    pass


def _finish(workdir, name, attempt, returncode, *, interrupted):
  attempt = dict(attempt, returncode=returncode, ended=time.time(),
                 interrupted=interrupted)
  rundir.write_json(paths.join(workdir, name, rundir.ATTEMPT), attempt)
  return attempt
