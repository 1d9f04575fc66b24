"""`sweep run` with a stand-in training process: skip, resume, fail, parallel.

The stand-in speaks the training loop's protocol (status.json, exit codes,
SIGTERM = save and exit 0) in a few lines, so the runner's bookkeeping is
tested in seconds; tests/test_sweep_e2e.py runs the real loop.
"""

import json
import os
import signal
import subprocess
import sys
import time

from softattn.sweep import __main__ as cli
from softattn.sweep import report as report_lib

FAKE_MAIN = r'''
import json, os, signal, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:])
workdir = args["--workdir"]
behavior = args.get("--config.behavior", "ok")
os.makedirs(workdir, exist_ok=True)
with open(os.path.join(workdir, "attempts"), "a") as f:
  f.write("x")
def status(**kw):
  with open(os.path.join(workdir, "status.json"), "w") as f:
    json.dump(dict(kw, flops_per_step=1e6, core_seconds=1.0), f)
print("starting", behavior, flush=True)
if behavior == "crash":
  raise RuntimeError("boom")
if behavior == "nan":
  status(state="failed", kind="nonfinite", message="non-finite loss at step 3",
         step=3, final={})
  sys.exit(3)
hangs = behavior == "hang" and args["--config.seed"] == "0"  # one run only
if hangs and not os.path.exists(os.path.join(workdir, "ckpt")):
  def on_term(*_):
    open(os.path.join(workdir, "ckpt"), "w").close()  # "saves a checkpoint"
    status(state="preempted", message="SIGTERM at step 5", step=5)
    sys.exit(0)
  signal.signal(signal.SIGTERM, on_term)
  status(state="running", step=0)
  while True:
    time.sleep(0.05)
resumed = os.path.exists(os.path.join(workdir, "ckpt"))
status(state="done", step=10,
       final={"eval_accuracy": 0.5, "resumed": resumed})
'''

SWEEP = """
import ml_collections
from softattn.sweep import grid

def get_config(arg=None):
  c = ml_collections.ConfigDict()
  c.behavior = "ok"
  c.seed = 0
  return c

def get_sweep(arg=None):
  return grid.product(grid.sweep("behavior", arg.split(",")),
                      grid.sweep("seed", [0, 1]))
"""


def _setup(tmp_path):
  (tmp_path / "fake_main.py").write_text(FAKE_MAIN)
  (tmp_path / "sw.py").write_text(SWEEP)
  launcher = f"{sys.executable} {tmp_path / 'fake_main.py'}"
  return str(tmp_path / "sw.py"), launcher, str(tmp_path / "runs")


def _attempts(workdir, name):
  with open(os.path.join(workdir, name, "attempts")) as f:
    return len(f.read())


def test_runs_in_parallel_records_failures_and_skips_finished(tmp_path, capsys):
  spec, launcher, workdir = _setup(tmp_path)
  argv = ["run", f"{spec}:ok,crash,nan", "--workdir", workdir, "--parallel",
          "3", "--launcher", launcher, "--skip_checks"]
  assert cli.main(argv) == 1  # some runs failed
  out = capsys.readouterr().out
  assert "done behavior-ok__seed-0" in out
  assert "failed behavior-crash__seed-1 (exit 1" in out and "boom" in out
  assert "failed behavior-nan__seed-0 (exit 3" in out
  manifest = json.load(open(os.path.join(workdir, "sweep.json")))
  assert len(manifest["runs"]) == 6
  assert manifest["runs"][2]["command"].endswith(
      "--config.behavior=crash --config.seed=0")

  # Second pass: nothing is rerun; failed runs stay failed with their reason.
  assert cli.main(argv) == 1
  out = capsys.readouterr().out
  assert "skip behavior-ok__seed-1: done" in out
  assert "skip behavior-nan__seed-1: failed before (non-finite loss" in out
  assert all(_attempts(workdir, r["name"]) == 1 for r in manifest["runs"])

  # --retry_failed reruns exactly the failed ones.
  assert cli.main(argv + ["--retry_failed"]) == 1
  capsys.readouterr()
  assert [_attempts(workdir, r["name"]) for r in manifest["runs"]] == [
      1, 1, 2, 2, 2, 2]

  runs = {r.name: r for r in report_lib.read_sweep(workdir)[0]}
  assert runs["behavior-crash__seed-0"].state == "failed"
  assert "RuntimeError: boom" in runs["behavior-crash__seed-0"].message
  assert runs["behavior-ok__seed-0"].metrics["final/accuracy"] == 0.5


def test_interrupted_sweep_resumes_the_stopped_run(tmp_path):
  spec, launcher, workdir = _setup(tmp_path)
  cmd = [sys.executable, "-m", "softattn.sweep", "run", f"{spec}:ok,hang",
         "--workdir", workdir, "--launcher", launcher, "--skip_checks"]
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
  status_path = os.path.join(workdir, "behavior-hang__seed-0", "status.json")
  deadline = time.time() + 60
  while not os.path.exists(status_path) and time.time() < deadline:
    time.sleep(0.1)
  assert os.path.exists(status_path), proc.communicate(timeout=30)[0]
  proc.send_signal(signal.SIGTERM)  # e.g. the machine is being preempted
  out, _ = proc.communicate(timeout=60)
  assert proc.returncode == 130, out
  assert "stopping 1 run(s)" in out
  attempt = json.load(open(os.path.join(workdir, "behavior-hang__seed-0",
                                        "sweep_attempt.json")))
  assert attempt["interrupted"] and attempt["returncode"] == 0
  status = json.load(open(status_path))
  assert status["state"] == "preempted" and status["step"] == 5

  res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
  assert res.returncode == 0, res.stdout + res.stderr
  assert "skip behavior-ok__seed-0: done" in res.stdout
  assert "resume behavior-hang__seed-0: stopped at step 5" in res.stdout
  final = json.load(open(status_path))["final"]
  assert final["resumed"] is True  # restarted from its "checkpoint"
  assert _attempts(workdir, "behavior-ok__seed-0") == 1
  assert _attempts(workdir, "behavior-hang__seed-0") == 2
  assert _attempts(workdir, "behavior-hang__seed-1") == 1


def test_dry_run_prints_states_and_commands(tmp_path, capsys):
  spec, launcher, workdir = _setup(tmp_path)
  assert cli.main(["run", f"{spec}:ok", "--workdir", workdir, "--dry_run",
                   "--launcher", launcher, "--skip_checks"]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[0] == "# seed-0: not_started"  # behavior is the same in all
  assert out[1].endswith(f"--workdir={workdir}/seed-0 "
                         "--config.behavior=ok --config.seed=0")
  assert not os.path.exists(workdir)


def test_only_runs_the_matching_runs_and_keeps_the_rest_listed(tmp_path,
                                                               capsys):
  spec, launcher, workdir = _setup(tmp_path)
  argv = ["run", f"{spec}:ok,crash", "--workdir", workdir, "--launcher",
          launcher, "--skip_checks"]
  assert cli.main(argv + ["--only", "*ok__seed-1"]) == 0
  assert "start [1/1] behavior-ok__seed-1" in capsys.readouterr().out
  states = {r.name: r.state for r in report_lib.read_sweep(workdir)[0]}
  assert states == {"behavior-ok__seed-0": "not_started",
                    "behavior-ok__seed-1": "done",
                    "behavior-crash__seed-0": "not_started",
                    "behavior-crash__seed-1": "not_started"}
  assert cli.main(argv + ["--only", "*seed-2"]) == 2
  assert "--only '*seed-2' matches no run" in capsys.readouterr().err


def test_several_sweeps_share_one_pool(tmp_path, capsys):
  """A study's parts as one queue: one numbering across the sweeps, each run
  in its own sweep's workdir, each workdir with its own manifest."""
  spec, launcher, root = _setup(tmp_path)
  a, b = os.path.join(root, "a"), os.path.join(root, "b")
  argv = ["run", f"{spec}:ok", f"{spec}:ok,nan", "--workdir", a,
          "--workdir", b, "--parallel", "2", "--launcher", launcher,
          "--skip_checks"]
  assert cli.main(argv) == 1          # b's nan runs fail
  out = capsys.readouterr().out
  assert "start [1/6] a/seed-0" in out and "start [6/6] b/" in out
  assert "done a/seed-1" in out and "failed b/behavior-nan__seed-0" in out
  assert "1 done" not in out and "4 done, 2 failed" in out
  assert len(json.load(open(os.path.join(a, "sweep.json")))["runs"]) == 2
  assert len(json.load(open(os.path.join(b, "sweep.json")))["runs"]) == 4
  assert _attempts(a, "seed-0") == 1 and _attempts(b, "behavior-ok__seed-0") == 1
  # --only may name runs of one sweep only; a name in none is an error.
  assert cli.main(argv + ["--only", "*nan__seed-1", "--retry_failed"]) == 1
  out = capsys.readouterr().out
  assert "start [1/1] b/behavior-nan__seed-1" in out
  assert cli.main(argv + ["--only", "*seed-7"]) == 2
  assert "matches no run in any of the sweeps" in capsys.readouterr().err
  # One --workdir per sweep, and never two sweeps in one folder.
  assert cli.main(argv[:5] + ["--launcher", launcher, "--skip_checks"]) == 2
  assert "give one --workdir per SPEC" in capsys.readouterr().err
  same = ["run", f"{spec}:ok", f"{spec}:nan", "--workdir", a, "--workdir", a,
          "--launcher", launcher, "--skip_checks"]
  assert cli.main(same) == 2
  assert "share a workdir" in capsys.readouterr().err
