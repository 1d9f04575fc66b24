"""A real tiny sweep: 2 normalizers x 2 depths x 1 seed on TFDS mock data.

Runs ``configs/sweeps/smoke.py`` through ``python -m softattn.sweep run
--mock_data`` (each run a ``softattn.main`` process), stops the sweep with
SIGTERM while one run is paused between checkpoints, resumes it, and reports.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from softattn.sweep import __main__ as cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAUSED = "depth-1__normalizer-softmax"
RUNS = ["depth-1__normalizer-softmax", "depth-1__normalizer-relu_seqlen",
        "depth-2__normalizer-softmax", "depth-2__normalizer-relu_seqlen"]


def _train_steps(run_dir):
  with open(os.path.join(run_dir, "metrics.jsonl")) as f:
    records = [json.loads(l) for l in f if l.strip()]
  return [r["step"] for r in records if r["split"] == "train"]


@pytest.mark.slow
def test_tiny_sweep_runs_is_interrupted_resumes_and_reports(tmp_path, capsys,
                                                          monkeypatch):
  workdir = str(tmp_path / "sweep")
  cmd = [sys.executable, "-m", "softattn.sweep", "run",
         "configs/sweeps/smoke.py", "--mock_data", "--workdir", workdir]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SOFTATTN_MOCK_EXAMPLES="32",
             # The resumed run and the FLOP count's second compile of the
             # train step reuse executables instead of compiling again.
             JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache"),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             # The first run waits at step 3 (after checkpoint 2) for a signal.
             SOFTATTN_MOCK_PAUSE=f"{PAUSED}:3")
  log_path = os.path.join(workdir, PAUSED, "sweep.log")
  proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  deadline = time.time() + 240
  paused = False
  while time.time() < deadline and proc.poll() is None:
    if os.path.exists(log_path) and "mock_main: paused at step 3" in open(
        log_path).read():
      paused = True
      break
    time.sleep(0.2)
  if not paused:
    proc.kill()
    pytest.fail("the run never reached step 3:\n" + proc.communicate()[0][-3000:]
                + (open(log_path).read()[-3000:] if os.path.exists(log_path)
                   else ""))
  proc.send_signal(signal.SIGTERM)
  out, _ = proc.communicate(timeout=120)
  assert proc.returncode == 130, out
  assert "start [2/4]" not in out  # one at a time: the others never started

  # The paused run took the SIGTERM as a preemption: saved step 4, not done.
  status = json.load(open(os.path.join(workdir, PAUSED, "status.json")))
  assert status["state"] == "preempted" and status["step"] == 4, status
  assert _train_steps(os.path.join(workdir, PAUSED)) == [1, 2, 3, 4]

  # Sequential before the stop; the rest two at a time.
  res = subprocess.run(cmd + ["--parallel", "2"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
  assert f"resume {PAUSED}: stopped at step 4" in res.stdout, res.stdout
  assert res.returncode == 0, res.stdout + res.stderr[-3000:]
  # Resumed from checkpoint 4, not restarted: each step trained exactly once.
  assert "Resumed from checkpoint step 4" in open(log_path).read()
  assert _train_steps(os.path.join(workdir, PAUSED)) == [1, 2, 3, 4, 5, 6]

  # A third pass finds nothing to do (in-process: it starts no run).
  monkeypatch.chdir(REPO)
  assert cli.main(cmd[3:]) == 0
  again = capsys.readouterr().out
  assert all(f"skip {r}: done" in again for r in RUNS), again

  assert cli.main(["report", workdir]) == 0
  with open(os.path.join(workdir, "results.csv")) as f:
    header, *lines = [l.strip().split(",") for l in f]
  rows = {l[0]: dict(zip(header, l)) for l in lines}
  assert sorted(rows) == sorted(RUNS)
  for name, row in rows.items():
    assert row["state"] == "done", (name, row["reason"])
    assert int(row["steps"]) == 6
    assert float(row["train_flops"]) == pytest.approx(
        6 * float(row["flops_per_step"]))
    assert 0.0 <= float(row["accuracy"]) <= 1.0
    assert float(row["core_seconds"]) > 0
  for norm in ("softmax", "relu_seqlen"):  # deeper = more FLOPs per step
    assert float(rows[f"depth-2__normalizer-{norm}"]["flops_per_step"]) > \
        float(rows[f"depth-1__normalizer-{norm}"]["flops_per_step"])
  fits = json.load(open(os.path.join(workdir, "fits.json")))["fits"]
  assert fits["softmax"]["fit"] is None and "at least 4" in \
      fits["softmax"]["reason"]  # two sizes cannot pin three parameters
  assert os.path.getsize(os.path.join(workdir, "scaling.png")) > 1000


def test_training_loop_config_errors_stop_the_sweep_before_it_starts(
    tmp_path, capsys, monkeypatch):
  monkeypatch.chdir(REPO)
  spec = tmp_path / "typo.py"
  # model.normalizer exists (the field check passes), but one value is a typo
  # that only the training loop's own checks know about.
  spec.write_text(textwrap.dedent(f"""
      from softattn.sweep import declaration, grid

      def get_config(arg=None):
        return declaration.config_from_file(
            {os.path.join(REPO, "configs/sweeps/smoke.py")!r})

      def get_sweep(arg=None):
        return grid.sweep("model.normalizer", ["softmax", "relu_seqlenn"])
      """))
  workdir = tmp_path / "sweep"
  assert cli.main(["run", str(spec), "--mock_data", "--workdir",
                   str(workdir)]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: run normalizer-relu_seqlenn: "
                        "config.model.normalizer='relu_seqlenn'"), err
  assert "valid names" in err
  assert not workdir.exists()
