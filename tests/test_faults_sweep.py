"""Faults around `sweep run` itself: a runner killed with SIGKILL.

The runner's children have sessions of their own (so a terminal Ctrl-C
reaches only the runner), so a SIGKILLed runner leaves its run training. The
next `sweep run` must see that run is alive and not start a second trainer
into the same directory; once the orphan is gone, a rerun resumes it.

A stand-in trainer keeps this at seconds (the runner's bookkeeping is the
subject; tests/test_sweep_e2e.py runs the real loop): it counts its starts in
the run directory, and its first start trains "forever", like a long run.
The rules that tell a live child from a dead one are tested one by one below.
"""

import json
import os
import signal
import subprocess
import sys
import time

from softattn.sweep import liveness

FAKE_MAIN = r'''
import json, os, signal, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:])
workdir = args["--workdir"]
os.makedirs(workdir, exist_ok=True)
with open(os.path.join(workdir, "starts"), "a") as f:
  f.write(f"{os.getpid()}\n")
def status(**kw):
  with open(os.path.join(workdir, "status.json.tmp"), "w") as f:
    json.dump(dict(kw, flops_per_step=1e6, core_seconds=1.0), f)
  os.replace(os.path.join(workdir, "status.json.tmp"),
             os.path.join(workdir, "status.json"))
with open(os.path.join(workdir, "starts")) as f:
  first = len(f.read().split()) == 1
if args["--config.behavior"] == "long" and first:
  def on_term(*_):
    status(state="preempted", message="SIGTERM at step 5", step=5)
    sys.exit(0)
  signal.signal(signal.SIGTERM, on_term)
  status(state="running", step=5)
  while True:
    time.sleep(0.05)
status(state="done", step=10, final={"eval_accuracy": 0.5})
'''

SWEEP = """
import ml_collections
from softattn.sweep import grid

def get_config(arg=None):
  c = ml_collections.ConfigDict()
  c.behavior = "ok"
  return c

def get_sweep(arg=None):
  return grid.sweep("behavior", ["long", "ok"])
"""

LONG, OK = "behavior-long", "behavior-ok"


def _starts(workdir, name):
  """The pids of every start of the stand-in in run ``name``, in order."""
  try:
    with open(os.path.join(workdir, name, "starts")) as f:
      return [int(p) for p in f.read().split()]
  except FileNotFoundError:
    return []


def _alive(pid):
  """Running (not a zombie waiting for init to reap it)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rpartition(")")[2].split()[0] not in "ZX"
  except FileNotFoundError:
    return False


def _wait(cond, timeout_s, what):
  deadline = time.time() + timeout_s
  while not cond():
    assert time.time() < deadline, f"timed out waiting for {what}"
    time.sleep(0.1)


def _kill_group(pid):
  try:
    os.killpg(pid, signal.SIGKILL)  # each run leads a session of its own
  except ProcessLookupError:
    pass


def test_sigkilled_runner_does_not_start_a_second_trainer(tmp_path):
  (tmp_path / "fake_main.py").write_text(FAKE_MAIN)
  (tmp_path / "sw.py").write_text(SWEEP)
  workdir = str(tmp_path / "runs")
  cmd = [sys.executable, "-m", "softattn.sweep", "run", str(tmp_path / "sw.py"),
         "--workdir", workdir, "--skip_checks",
         "--launcher", f"{sys.executable} {tmp_path / 'fake_main.py'}"]
  status_path = os.path.join(workdir, LONG, "status.json")
  runner = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
  try:
    _wait(lambda: os.path.exists(status_path), 60, "the long run to start")
    runner.kill()  # SIGKILL: no handler runs, the run is left training
    runner.wait(timeout=30)
    [orphan] = _starts(workdir, LONG)
    assert _alive(orphan)

    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert _starts(workdir, LONG) == [orphan], res.stdout  # no second trainer
    assert res.returncode == 1, res.stdout + res.stderr  # not all runs done
    [line] = [l for l in res.stdout.splitlines() if LONG in l]
    assert line.startswith(f"skip {LONG}: running") and f"pid {orphan}" in line
    assert "1 done, 1 running" in res.stdout
    assert len(_starts(workdir, OK)) == 1  # the other run went ahead
    attempt = json.load(open(os.path.join(workdir, LONG, "sweep_attempt.json")))
    assert attempt["pid"] == orphan  # still the orphan's record

    _kill_group(orphan)
    _wait(lambda: not _alive(orphan), 30, "the orphan to die")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"resume {LONG}: running or stopped at step 5" in res.stdout
    assert f"skip {OK}: done" in res.stdout
    assert len(_starts(workdir, LONG)) == 2 and len(_starts(workdir, OK)) == 1
  finally:
    if runner.poll() is None:
      runner.kill()
      runner.wait(timeout=30)
    for name in (LONG, OK):
      for pid in _starts(workdir, name):
        _kill_group(pid)


def test_a_record_is_alive_only_while_its_own_process_runs(tmp_path):
  run_dir = str(tmp_path)
  me = dict(liveness.identify(os.getpid()), started=time.time())
  assert "running as pid" in liveness.check(me, run_dir)
  # The kernel reused the pid: another start time. Or the machine rebooted.
  assert liveness.check(dict(me, proc_start=me["proc_start"] + 1),
                        run_dir) is None
  assert liveness.check(dict(me, boot_id="another boot"), run_dir) is None
  assert liveness.check({"started": time.time()}, run_dir) is None  # old record

  # A child that exited but was not reaped yet (a zombie) is dead.
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  try:
    child = liveness.identify(proc.pid)
    _wait(lambda: not _alive(proc.pid), 30, "the child to exit")
    assert liveness.check(child, run_dir) is None
  finally:
    proc.wait(timeout=30)
  assert liveness.check(child, run_dir) is None  # reaped: no such process


def test_a_record_from_another_host_is_alive_while_its_status_is_fresh(
    tmp_path):
  run_dir = str(tmp_path)
  other = {"host": "elsewhere", "pid": 1, "started": time.time()}
  line = liveness.check(other, run_dir)  # no status.json yet: its start counts
  assert line.startswith("running elsewhere (host elsewhere, pid 1)")
  old = time.time() - liveness.FOREIGN_STALE_S - 60
  assert liveness.check(dict(other, started=old), run_dir) is None
  status = tmp_path / "status.json"
  status.write_text("{}")
  assert liveness.check(dict(other, started=old), run_dir) is not None
  os.utime(status, (old, old))
  assert liveness.check(dict(other, started=old), run_dir) is None
