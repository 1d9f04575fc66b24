"""Faults a user meets at the command line and in a run's logs.

* A torn ``metrics.jsonl`` (a disk-full crash ends it mid-line): the resumed
  run's first record stays readable, and a line that cannot be read is named
  (file and line), never dropped silently.
* libtpu's start-up errors on a host without a TPU: every CLI's stderr is
  only its own lines (``softattn.platforms``).
* A stale ``STORAGE_EMULATOR_HOST``: the workdir check says so in one line,
  at once.
"""

import json
import os
import socket
import subprocess
import sys
import time
import warnings

import pytest

from softattn import metrics, paths, platforms, workdir_check
from softattn.sweep import report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ----------------------------------------------------------------------------
# A torn metrics.jsonl.


def _torn_run(run_dir):
  """A run directory whose ``metrics.jsonl`` a full disk cut mid-record."""
  os.makedirs(run_dir)
  p = os.path.join(run_dir, "metrics.jsonl")
  with open(p, "w") as f:
    f.write('{"step": 0, "split": "info", "num_params": 1234}\n'
            '{"step": 1, "split": "train", "loss": 0.5}\n'
            '{"step": 2, "split": "tr')
  return p


def test_a_resumed_run_appending_to_a_torn_log_keeps_its_first_record(
    tmp_path):
  p = _torn_run(str(tmp_path / "run"))
  writer = metrics.JsonlWriter(p)  # what the resumed run opens
  writer.write_scalars(3, {"eval/accuracy": 0.75})
  writer.close()
  with pytest.warns(paths.UnparsableLinesWarning,
                    match=r"metrics\.jsonl line 3\b"):
    recs = metrics.read_jsonl(p)
  assert [r["step"] for r in recs] == [0, 1, 3]
  # The sweep report reads the same record as the run's final metric.
  with pytest.warns(paths.UnparsableLinesWarning):
    final = report.final_metric(str(tmp_path / "run"), None, "accuracy")
  assert final == (0.75, None)


def test_an_append_log_that_ends_in_a_newline_gets_none_added(tmp_path):
  p = tmp_path / "sweep.log"
  p.write_bytes(b"attempt 1\n")
  log = paths.AppendLog(p)
  log.write("attempt 2\n")
  log.close()
  assert p.read_bytes() == b"attempt 1\nattempt 2\n"


def test_a_garbage_line_is_named_with_its_file_and_line(tmp_path):
  run = tmp_path / "sweep" / "r1"
  run.mkdir(parents=True)
  p = run / "metrics.jsonl"
  p.write_text('{"step": 1, "split": "train", "loss": 1.0}\nnot json\n'
               '{"step": 2, "split": "eval", "accuracy": 0.5}\n')
  with pytest.warns(paths.UnparsableLinesWarning) as got:
    recs = metrics.read_jsonl(str(p), "eval")
  assert [r["step"] for r in recs] == [2]
  message = str(got[0].message)
  assert f"{p} line 2" in message and "\n" not in message
  scan = paths.scan_json_lines(p)
  assert len(scan.records) == 2
  assert scan.unparsable == [paths.Unparsable(str(p), 2, "not json")]
  # The sweep report says so in results.md and on the command line.
  (run / "status.json").write_text(json.dumps(
      {"state": "done", "step": 2, "final": {"eval_accuracy": 0.5}}))
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the report names it, it does not warn
    res = report.report(str(tmp_path / "sweep"), plot=False)
  assert res["unparsable"] == {"r1": [paths.Unparsable(str(p), 2, "not json")]}
  md = (tmp_path / "sweep" / "results.md").read_text()
  assert "r1" in md and "metrics.jsonl line 2" in md


# ----------------------------------------------------------------------------
# libtpu's start-up errors off a TPU.

LIBTPU_LINES = ("host bounds", "Source Location Trace", "libtpu",
                "InitGoogle", "common_lib.cc", "TPU_WORKER_HOSTNAMES")


def _newcomer_env(tmp_path):
  """A shell on a CPU host with the ``test`` extra, nothing set by hand."""
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("TPU_", "JAX_PLATFORMS", "JAX_FORCE_TPU"))}
  env.update(
      PYTHONPATH=REPO, TFDS_DATA_DIR=str(tmp_path / "no_data"),
      # libtpu takes a machine-wide lock; another process on this shared
      # host may hold it, which would hide the messages a newcomer sees.
      ALLOW_MULTIPLE_LIBTPU_LOAD="1",
      # TensorFlow's own start-up INFO lines (oneDNN, CPU features): not
      # libtpu's, and not what these tests count.
      TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="1")
  return env


CLIS = {
    # A config error found after jax started (the dataset is not prepared).
    "main": (["softattn.main", "--config=configs/quickstart.py:runlocal",
              "--workdir={tmp}/wd"], 2, ["config error: "]),
    # Loads libtpu's compiler for an abstract v5e-4, then a config error.
    "aot": (["softattn.aot", "--config=configs/quickstart.py",
             "--topology=v5e-4", "--config.batch_size=7"], 2,
            ["error: batch_size=7 is not divisible"]),
    "sweep": (["softattn.sweep", "run", "configs/sweeps/smoke.py",
               "--workdir={tmp}/sweep", "--dry_run"], 2, ["error: run "]),
    "data": (["softattn.data", "prepare", "imagenet21k"], 2,
             ["error: imagenet21k needs --source"]),
    "quickstart": (["softattn.quickstart", "--help"], 0, []),
}


@pytest.mark.parametrize("cli", list(CLIS))
def test_a_cli_on_a_host_without_a_tpu_prints_only_its_own_lines(
    cli, tmp_path):
  # What is tested is a host *without* a TPU: on a TPU VM libtpu must start
  # (and may log), so the claim does not apply there. CI and the README's
  # machines have no TPU, so this never skips where the suite is judged.
  if platforms.tpu_here():
    pytest.skip("this host may have a TPU: libtpu starts for real here")
  args, code, expected = CLIS[cli]
  proc = subprocess.run(
      [sys.executable, "-m", *[a.format(tmp=tmp_path) for a in args]],
      cwd=REPO, env=_newcomer_env(tmp_path), capture_output=True, text=True,
      timeout=120)
  lines = proc.stderr.splitlines()
  assert proc.returncode == code, proc.stderr[-3000:]
  assert not [l for l in lines if any(s in l for s in LIBTPU_LINES)], lines
  assert len(lines) == len(expected), lines
  for line, start in zip(lines, expected):
    assert line.startswith(start), lines


def test_the_platform_choice_yields_to_the_user_and_to_a_tpu_or_gpu(
    monkeypatch):
  env = {k: v for k, v in os.environ.items() if k not in (
      "JAX_PLATFORMS", "JAX_FORCE_TPU_INIT", *platforms.QUIET_TPU_ENV)}
  monkeypatch.setattr(os, "environ", env)  # this process's stays as it was
  monkeypatch.setattr(platforms, "_libtpu_installed", lambda: True)
  monkeypatch.setattr(platforms, "tpu_here", lambda: True)
  platforms.quiet_start()  # a TPU VM: jax's own choice, libtpu untouched
  assert not {"JAX_PLATFORMS", *platforms.QUIET_TPU_ENV} & set(os.environ)

  monkeypatch.setattr(platforms, "tpu_here", lambda: False)
  monkeypatch.delitem(sys.modules, "jax")  # as before a CLI imports it
  monkeypatch.setattr(platforms, "_jax_plugin_installed", lambda: True)
  platforms.quiet_start()  # a GPU host: jax still picks, libtpu is quiet
  assert "JAX_PLATFORMS" not in os.environ
  assert os.environ["TPU_HOST_BOUNDS"] == "1,1,1"

  monkeypatch.setattr(platforms, "_jax_plugin_installed", lambda: False)
  env["JAX_PLATFORMS"] = ""  # the user's, even empty, wins
  platforms.quiet_start()
  assert os.environ["JAX_PLATFORMS"] == ""
  del env["JAX_PLATFORMS"]
  platforms.quiet_start()  # a CPU host: libtpu is never loaded
  assert os.environ["JAX_PLATFORMS"] == "cpu"


# ----------------------------------------------------------------------------
# A stale STORAGE_EMULATOR_HOST.


def _closed_port_url():
  with socket.socket() as s:  # a loopback port nobody listens on
    s.bind(("127.0.0.1", 0))
    return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_refused_emulator_is_one_line_at_once(monkeypatch, capfd):
  url = _closed_port_url()
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
  start = time.monotonic()
  # timeout_s bounds this test on code without the fix (gcsfs retries ~40 s).
  with pytest.raises(paths.PathError) as e:
    workdir_check.check_writable("gs://some-bucket/run", timeout_s=10)
  assert time.monotonic() - start < 3
  line = str(e.value)
  assert "\n" not in line and f"no answer from {url}" in line
  assert "refused" in line and "STORAGE_EMULATOR_HOST" in line
  assert not capfd.readouterr().err  # no gcsfs tracebacks


def test_main_with_a_refused_emulator_says_workdir_error_in_one_line(tmp_path):
  env = _newcomer_env(tmp_path)
  env["STORAGE_EMULATOR_HOST"] = _closed_port_url()
  start = time.monotonic()
  # On mock data (sweep.mock_main) so that the config passes its checks.
  proc = subprocess.run(
      [sys.executable, "-m", "softattn.sweep.mock_main",
       "--config=configs/quickstart.py", "--workdir=gs://some-bucket/run"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  elapsed = time.monotonic() - start
  # tfds.testing.mock_data's own deprecation warnings are mock_main's.
  lines = [l for l in proc.stderr.splitlines() if "TensorInfo.dtype" not in l]
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert len(lines) == 1 and lines[0].startswith("workdir error: "), lines
  assert "refused" in lines[0]
  assert elapsed < 30, elapsed  # start-up, then the check at once (was ~40 s)
