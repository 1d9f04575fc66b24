"""Faults a preemptible training job meets, injected for real, and what remains.

Each test injects one fault (a SIGTERM inside a given phase of the loop, a
damaged checkpoint, a second run into a live workdir, a changed config, a
bucket that stops answering, a full disk) and checks what the user sees and
what is left in the workdir: after each, a rerun ends bitwise equal to the
uninterrupted run, or the job stops with its one line and exit code. Tiny
ViT, 6 steps, one XLA cache for the module (the runs compile the same
programs); the in-process runs share it with the subprocess ones.
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from softattn import checkpointing, config_diff, lease, runstate

sys.path.insert(0, os.path.dirname(__file__))
import gcs_emulator  # pylint: disable=g-import-not-at-top,wrong-import-position
import tiny_data  # pylint: disable=g-import-not-at-top,wrong-import-position
import train_runner  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = train_runner.REPO
QUICK = "configs/quickstart.py:runlocal"
# Saves every 2 steps; logs and evaluates at 3, a step that does not save.
FAULT = {"total_steps": 6, "checkpoint_every": 2, "log_every": 3,
         "eval_every": 3, "keep_checkpoints": 10, "checkpoint_async": False,
         "verbose": False}
EXAMPLES = 20


def _spec(workdir, **kw):
  return dict(config=QUICK, overrides=dict(FAULT, **kw.pop("overrides", {})),
              workdir=str(workdir), num_examples=EXAMPLES, **kw)


def _status(workdir):
  return json.load(open(os.path.join(workdir, "status.json")))


def _steps(workdir):
  return sorted(os.listdir(os.path.join(workdir, "checkpoints")))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  with tiny_data.compile_cache(str(tmp_path_factory.mktemp("xla")), 0.0) as d:
    yield d


@pytest.fixture(scope="module")
def straight(tmp_path_factory, cache):
  """The uninterrupted run: ``(workdir, final params)``."""
  del cache
  wd = tmp_path_factory.mktemp("straight")
  train_runner.run(_spec(wd))
  return wd, train_runner.final_params(wd)


def _assert_resumes_bitwise(workdir, straight, **kw):
  train_runner.run(_spec(workdir, **kw))
  step, params = train_runner.final_params(workdir)
  assert step == straight[1][0] == 6
  train_runner.assert_bitwise_equal(straight[1][1], params)
  assert _status(workdir)["state"] == "done"


# ----------------------------------------------------------------------------
# SIGTERM in each phase of the loop.


@pytest.fixture(scope="module")
def preempted_in_save(tmp_path_factory, straight):
  """A run SIGTERMed inside step 4's save: checkpoints 2 and 4, sealed."""
  del straight  # after it: its compiles fill the cache
  wd = tmp_path_factory.mktemp("preempted")
  train_runner.run(_spec(wd, sigterm_in=["save", 4]))
  return wd


# During a plain step (its batch) the next step saves: tests/test_train.py's
# test_sigterm_saves_and_resume_is_bitwise_identical.
@pytest.mark.parametrize("phase,at,saved", [
    ("log", 3, 3),    # during the log line of a step that does not save
    ("eval", 3, 3),   # during the evaluation of a step that does not save
])
def test_sigterm_in_any_phase_saves_that_step_and_resumes_bitwise(
    straight, tmp_path, phase, at, saved):
  train_runner.run(_spec(tmp_path, sigterm_in=[phase, at]))
  status = _status(tmp_path)
  # The step reported is one that exists on disk, sealed.
  assert (status["state"], status["step"], status["saved_step"]) == (
      "preempted", saved, saved), status
  assert str(saved) in _steps(tmp_path)
  assert os.path.exists(tmp_path / "checkpoints" / str(saved) / "digests.json")
  assert f"at step {saved}" in status["message"]
  _assert_resumes_bitwise(tmp_path, straight)


def test_sigterm_during_a_save_reports_that_save(preempted_in_save, straight,
                                                 tmp_path):
  status = _status(preempted_in_save)
  assert (status["state"], status["step"], status["saved_step"]) == (
      "preempted", 4, 4)
  assert _steps(preempted_in_save) == ["2", "4"]
  shutil.copytree(preempted_in_save, tmp_path / "w")
  _assert_resumes_bitwise(tmp_path / "w", straight)


# ----------------------------------------------------------------------------
# A damaged newest checkpoint.


def _data_file(step_dir):
  """The largest array data file Orbax wrote for this process."""
  files = glob.glob(os.path.join(step_dir, "default", "ocdbt.process_0", "d",
                                 "*"))
  return max(files, key=os.path.getsize)


def _damage(step_dir, kind):
  if kind == "truncated":
    f = _data_file(step_dir)
    os.truncate(f, os.path.getsize(f) // 2)
  elif kind == "bit_flip":  # restores silently as other numbers without a seal
    f = _data_file(step_dir)
    raw = bytearray(open(f, "rb").read())
    raw[len(raw) // 3] ^= 0x10
    open(f, "wb").write(bytes(raw))
  elif kind == "no_metadata":
    os.remove(os.path.join(step_dir, "default", "_METADATA"))
  elif kind == "emptied":
    shutil.rmtree(step_dir)
    os.mkdir(step_dir)


@pytest.mark.parametrize("kind", ["truncated", "bit_flip", "no_metadata",
                                  "emptied"])
def test_a_damaged_newest_checkpoint_is_moved_aside_and_the_run_falls_back(
    preempted_in_save, straight, tmp_path, kind):
  wd = tmp_path / "w"
  shutil.copytree(preempted_in_save, wd)
  _damage(str(wd / "checkpoints" / "4"), kind)
  _assert_resumes_bitwise(wd, straight)
  assert "4.damaged" in _steps(wd)  # kept, not deleted
  status = _status(wd)
  assert len(status["damaged"]) == 1 and "4.damaged" in status["damaged"][0]
  assert status["furthest_step"] == 6


def test_no_restorable_checkpoint_is_one_line_and_moves_nothing(
    preempted_in_save, tmp_path):
  wd = tmp_path / "w"
  shutil.copytree(preempted_in_save, wd)
  _damage(str(wd / "checkpoints" / "4"), "truncated")
  _damage(str(wd / "checkpoints" / "2"), "no_metadata")
  with pytest.raises(checkpointing.NoGoodCheckpoint) as e:
    train_runner.run(_spec(wd))
  msg = str(e.value)
  assert "\n" not in msg and "4: " in msg and "2: " in msg, msg
  assert _steps(wd) == ["2", "4"]
  status = _status(wd)
  # Failed, and the record of how far the run got is kept.
  assert (status["state"], status["kind"], status["furthest_step"]) == (
      "failed", "damaged", 4)


# ----------------------------------------------------------------------------
# One writer per workdir; a resume keeps its config.


def test_a_changed_config_on_resume_is_refused_naming_the_fields(
    preempted_in_save, straight, tmp_path):
  wd = tmp_path / "w"
  shutil.copytree(preempted_in_save, wd)
  before = _status(wd)
  with pytest.raises(config_diff.ConfigChanged) as e:
    train_runner.run(_spec(wd, overrides={"schedule.base_lr": 0.5,
                                          "log_every": 1}))
  msg = str(e.value)
  assert "schedule.base_lr" in msg and "log_every" not in msg, msg
  assert "--allow_config_change" in msg and "\n" not in msg
  assert _status(wd) == before  # the refused run wrote nothing
  # A cadence may change on resume, and the params are the same.
  _assert_resumes_bitwise(wd, straight, overrides={"log_every": 1})


def test_config_diff_lets_only_the_resumable_fields_through():
  saved = {"total_steps": 6, "mesh": {"data": -1}, "schedule": {"base_lr": 1},
           "data": {"name": "x", "data_dir": "/a"}, "model": {"depth": 2}}
  new = {"total_steps": 9, "mesh": {"data": 4}, "schedule": {"base_lr": 1},
         "data": {"name": "x", "data_dir": "/b"}, "model": {"depth": 3,
                                                            "extra": 1}}
  assert config_diff.changed_fields(saved, new) == ["model.depth",
                                                    "model.extra"]


def test_a_field_added_since_the_run_started_is_a_change_only_off_default():
  """A workdir written before ``model.num_registers`` existed resumes with it
  at 0 (the same model); at 4 it is another model."""
  saved = {"model": {"depth": 2}}
  for field, same in config_diff.ADDED_FIELDS.items():
    section, key = field.split(".")
    new = {"model": {"depth": 2}}
    new.setdefault(section, {})[key] = same
    assert config_diff.changed_fields(saved, new) == [], field
    new[section][key] = 4
    assert config_diff.changed_fields(saved, new) == [field]
  # Present in both: compared as any field.
  assert config_diff.changed_fields({"model": {"num_registers": 4}},
                                    {"model": {"num_registers": 0}}) == [
                                        "model.num_registers"]


def _mock_main(workdir, *args, env=None):
  return subprocess.Popen(
      [sys.executable, "-m", "softattn.sweep.mock_main",
       f"--config={os.path.join(REPO, QUICK)}", f"--workdir={workdir}",
       *(f"--config.{k}={v}" for k, v in FAULT.items()), *args],
      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True)


def _env(cache, **extra):
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO,
              JAX_COMPILATION_CACHE_DIR=cache,
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
              SOFTATTN_MOCK_EXAMPLES=str(EXAMPLES), **extra)


def _wait_for_line(proc, text, timeout_s=180):
  deadline = time.time() + timeout_s
  lines = []
  while time.time() < deadline:
    line = proc.stdout.readline()
    if not line and proc.poll() is not None:
      break
    lines.append(line)
    if text in line:
      return
  proc.kill()
  raise AssertionError(f"no {text!r}: {''.join(lines)}{proc.stderr.read()}")


def _finish(proc, timeout_s=180):
  try:
    out, err = proc.communicate(timeout=timeout_s)
  finally:
    proc.kill()
  return proc.returncode, out, err


def _the_line(err, prefix):
  """softattn's one line on stderr: the last, no traceback before it (the
  libraries' start-up chatter of a mock-data run is not softattn's)."""
  lines = [line for line in err.splitlines() if line.strip()]
  assert "Traceback" not in err and lines, err[-3000:]
  assert lines[-1].startswith(prefix), err[-3000:]
  assert sum(line.startswith(prefix) for line in lines) == 1, err[-3000:]
  return lines[-1]


def test_a_second_run_into_a_live_workdir_is_refused(cache, tmp_path):
  wd = tmp_path / "run"
  env = _env(cache, SOFTATTN_MOCK_PAUSE="run:2")
  first = _mock_main(wd, env=env)
  try:
    _wait_for_line(first, "paused at step 2")
    before = _status(wd)
    code, _, err = _finish(_mock_main(wd, env=env))
    assert code == 2, err
    assert f"pid {first.pid}" in _the_line(err, "workdir error:")
    assert _status(wd) == before
    first.send_signal(signal.SIGTERM)
    code, _, err = _finish(first)
    assert code == 0, err
  finally:
    first.kill()
  # Every metrics record written once.
  records = open(wd / "metrics.jsonl").read().splitlines()
  assert records and len(records) == len(set(records)), records


def test_a_stale_lease_on_a_bucket_is_taken_over_and_a_live_one_refused(
    tmp_path):
  del tmp_path
  with gcs_emulator.running(gcs_emulator.BUCKET):
    wd = f"gs://{gcs_emulator.BUCKET}/leased"
    holder = lease.Lease(wd, heartbeat_s=0.2).acquire()
    try:
      with pytest.raises(lease.WorkdirBusy, match=f"pid {os.getpid()}"):
        lease.Lease(wd).acquire()
      # The holder stops beating (its VM is gone): stale after stale_s.
      holder._stop.set()  # pylint: disable=protected-access
      holder._thread.join()  # pylint: disable=protected-access
      time.sleep(0.6)
      taker = lease.Lease(wd, stale_s=0.5).acquire()
      # The old holder, beating again, finds it taken over.
      holder._upload_or_lose()  # pylint: disable=protected-access
      assert holder.lost.is_set()
      with pytest.raises(lease.WorkdirBusy, match="took over"):
        holder.check()
      taker.release()
      lease.Lease(wd).acquire().release()  # released: free again
    finally:
      holder.release()


# ----------------------------------------------------------------------------
# I/O faults past the retries: one line, exit 4, status where writable.


def test_a_full_disk_is_one_line_exit_4_and_the_rerun_resumes(
    cache, straight, tmp_path):
  mount = tmp_path / "disk"
  mount.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs",
                     str(mount)], capture_output=True).returncode != 0:
    pytest.fail("mounting a tmpfs needs root (CI and the README's machines "
                "run as root)", pytrace=False)
  try:
    wd = mount / "run"
    proc = _mock_main(wd, env=_env(cache, SOFTATTN_MOCK_PAUSE="run:2"))
    try:
      _wait_for_line(proc, "paused at step 2")
      filler = mount / "filler"
      # Fill the disk to the last block, unbuffered: a buffered file keeps
      # the bytes its failed flush could not write and raises ENOSPC again
      # when it closes (seen once in 10+ runs, as the tmpfs's free bytes
      # fell on a buffer boundary or not).
      with open(filler, "wb", buffering=0) as f:
        try:
          while True:
            f.write(b"\0" * 65536)
        except OSError:
          pass
      proc.send_signal(signal.SIGTERM)  # step 2 saves into a full disk
      code, _, err = _finish(proc)
    finally:
      proc.kill()
    assert code == 4, err
    assert "disk full" in _the_line(err, "workdir I/O error:")
    assert not glob.glob(str(wd / "**" / "*.tmp"), recursive=True)
    os.remove(filler)
    shutil.copytree(wd, tmp_path / "copy")  # off the tmpfs, for the rerun
  finally:
    subprocess.run(["umount", "-l", str(mount)], check=False)
  _assert_resumes_bitwise(tmp_path / "copy", straight)


def test_a_bucket_gone_past_the_retries_is_one_line_exit_4(cache, straight,
                                                           tmp_path):
  with gcs_emulator.serving(gcs_emulator.BUCKET) as server:
    wd = f"gs://{gcs_emulator.BUCKET}/run"
    env = _env(cache, SOFTATTN_MOCK_PAUSE="run:2",
               **gcs_emulator.client_env(server.url))
    proc = _mock_main(wd, env=env)
    try:
      _wait_for_line(proc, "paused at step 2")
      copy = tmp_path / "copy"  # what the bucket held at the outage
      gcs_emulator.filesystem().get(f"{gcs_emulator.BUCKET}/run/", str(copy),
                                    recursive=True)
      # The outage: the server stops; the preemption notice then asks the
      # loop to save step 2 into it.
      start = time.monotonic()
      server.stop()
      proc.send_signal(signal.SIGTERM)
      code, _, err = _finish(proc, timeout_s=300)
      took = time.monotonic() - start
    finally:
      proc.kill()
  assert code == 4, err
  line = _the_line(err, "workdir I/O error:")
  assert "unreachable" in line and "gs://bucket/run" in line, line
  print(f"exit 4 after {took:.0f} s: {line}")
  _assert_resumes_bitwise(copy, straight)
