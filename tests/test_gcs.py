"""Runs whose workdir is ``gs://``, against a GCS server on 127.0.0.1.

fake-gcs-server (``tests/gcs_emulator.py``) is started once for this module
and killed at its end; every client a run uses (gcsfs through
``softattn.paths`` and Orbax, tensorstore for the arrays, our TensorBoard
event writer) talks to it. A run writes every file into the bucket and none
on local disk; SIGKILL and SIGTERM mid-run both resume from the bucket to
bitwise the uninterrupted run; a sweep directory, a TFDS data_dir and the
AOT table live in the bucket; each bad workdir is one line and exit 2 before
anything compiles.
"""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from softattn import events, metrics, paths, runstate

sys.path.insert(0, os.path.dirname(__file__))
import gcs_emulator  # pylint: disable=g-import-not-at-top,wrong-import-position
import tiny_data  # pylint: disable=g-import-not-at-top,wrong-import-position
import train_runner  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = train_runner.REPO
QUICK = "configs/quickstart.py:runlocal"
B = f"gs://{gcs_emulator.BUCKET}"
# As tests/test_train.py: synchronous saves (mock_data's file-system patch
# races Orbax's save thread); params do not depend on the log/eval cadence.
RESUME = {"total_steps": 6, "checkpoint_every": 2, "log_every": 3,
          "eval_every": 6, "checkpoint_async": False, "verbose": False}
EXAMPLES = 20


@pytest.fixture(scope="module")
def gcs():
  with gcs_emulator.running(gcs_emulator.BUCKET) as url:
    yield url


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
  with tiny_data.compile_cache(str(tmp_path_factory.mktemp("xla_cache")),
                               0.0) as d:
    yield d


def _objects(prefix):
  """Object names under ``gs://bucket/<prefix>/``, relative to it."""
  fs = gcs_emulator.filesystem()
  root = f"{gcs_emulator.BUCKET}/{prefix}/"
  return sorted(f[len(root):] for f in fs.find(root))


def _env(tmp, cache):
  """A subprocess environment: the emulator's, a fresh TMPDIR, the XLA cache."""
  tmpdir = tmp / "tmpdir"
  tmpdir.mkdir(exist_ok=True)
  return dict(os.environ, TMPDIR=str(tmpdir), TF_CPP_MIN_LOG_LEVEL="2",
              PYTHONPATH=REPO, JAX_COMPILATION_CACHE_DIR=cache,
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
              SOFTATTN_MOCK_EXAMPLES=str(EXAMPLES))


def _main(args, cwd, env, timeout=240):
  """``python -m softattn.main`` on TFDS mock data (``sweep.mock_main``)."""
  return subprocess.run(
      [sys.executable, "-m", "softattn.sweep.mock_main",
       f"--config={os.path.join(REPO, QUICK)}", *args],
      cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _runner(spec, cwd, env):
  return subprocess.run(
      [sys.executable, os.path.join(REPO, "tests", "train_runner.py"),
       json.dumps(spec)], cwd=cwd, env=env, capture_output=True, text=True,
      timeout=240)


def _spec(workdir, **kw):
  return dict(config=QUICK, overrides=dict(RESUME), workdir=workdir,
              num_examples=EXAMPLES, **kw)


def _local_files(*dirs):
  return sorted(os.path.relpath(os.path.join(r, f), d) for d in dirs
                for r, _, fs in os.walk(d) for f in fs)


# ----------------------------------------------------------------------------
# The path layer on a bucket.


def test_status_metrics_and_logs_round_trip_through_the_bucket(gcs):
  wd = f"{B}/units"
  runstate.write(wd, runstate.Status(state=runstate.State.RUNNING, step=3))
  runstate.write(wd, runstate.Status(state=runstate.State.DONE, step=6))
  assert runstate.read(wd).state == "done" and runstate.read(wd).step == 6
  assert _objects("units") == ["status.json"]  # no .tmp: one upload is atomic

  # A log rolled into parts (tiny roll size), resumed by a second writer.
  log = paths.AppendLog(f"{wd}/metrics.jsonl", roll_bytes=40)
  for step in range(1, 6):
    log.write(json.dumps({"step": step, "split": "train", "loss": 1.0}) + "\n")
    log.flush()
  log.close()
  again = metrics.JsonlWriter(f"{wd}/metrics.jsonl")
  again.write_scalars(6, {"eval/accuracy": 0.5})
  again.close()
  names = [n for n in _objects("units") if n.startswith("metrics")]
  assert names == [f"metrics.jsonl.part-{k:06d}" for k in range(6)]
  recs = metrics.read_jsonl(f"{wd}/metrics.jsonl")
  assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
  assert metrics.read_jsonl(f"{wd}/metrics.jsonl", "eval") == [
      {"step": 6, "split": "eval", "accuracy": 0.5}]


def test_tensorboard_reads_the_event_files_written_to_the_bucket(gcs, tmp_path):
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  from tensorboard.util import tensor_util  # pylint: disable=g-import-not-at-top
  wd = f"{B}/tb"
  w = events.EventsWriter(wd)
  w.write_scalars(1, {"train/loss": 0.75, "train/accuracy": np.float32(0.5)})
  w.flush()
  w.write_scalars(2, {"train/loss": 0.5})
  w.write_texts(0, {"info/parameter_overview": "| name | shape |"})
  w.close()
  # TensorBoard's own reader, on a copy of exactly the bucket's bytes.
  fs = gcs_emulator.filesystem()
  names = _objects("tb")
  assert names and all(n.startswith("events.out.tfevents.") for n in names)
  for n in names:
    (tmp_path / n).write_bytes(fs.cat(f"{gcs_emulator.BUCKET}/tb/{n}"))
  acc = event_accumulator.EventAccumulator(
      str(tmp_path), size_guidance={event_accumulator.TENSORS: 0}).Reload()
  loss = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
          for e in acc.Tensors("train/loss")]
  assert loss == [(1, 0.75), (2, 0.5)]
  assert len(acc.Tensors("train/accuracy")) == 1
  text = acc.Tensors("info/parameter_overview")[0].tensor_proto.string_val
  assert text == [b"| name | shape |"]


# ----------------------------------------------------------------------------
# Whole runs.


@pytest.fixture(scope="module")
def straight(gcs, compile_cache, tmp_path_factory):
  """The uninterrupted run, through the command line, in a clean cwd."""
  tmp = tmp_path_factory.mktemp("straight")
  cwd = tmp / "cwd"
  cwd.mkdir()
  env = _env(tmp, compile_cache)
  over = [f"--config.{k}={v}" for k, v in RESUME.items()]
  proc = _main([f"--workdir={B}/straight", *over], cwd, env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return f"{B}/straight", tmp


def test_a_run_writes_every_file_to_the_bucket_and_none_locally(straight):
  wd, tmp = straight
  names = _objects("straight")
  top = {n.split("/")[0] for n in names}
  assert {"config.json", "status.json", "checkpoints"} <= top
  assert any(n.startswith("metrics.jsonl.part-") for n in top)
  assert any(n.startswith("events.out.tfevents.") for n in top)
  # keep_checkpoints=2 in the quickstart config: step 2 was rotated out.
  assert {n.split("/")[1] for n in names if n.startswith("checkpoints/")} == {
      "4", "6"}
  status = runstate.read(wd)
  assert status.state == "done" and status.step == 6
  assert status.flops_per_step > 0
  train = [r["step"] for r in metrics.read_jsonl(wd + "/metrics.jsonl", "train")
           if "loss" in r]
  assert train == [3, 6]
  assert paths.read_json(wd + "/config.json")["total_steps"] == 6
  # Nothing in the working directory or the process's TMPDIR.
  assert _local_files(tmp / "cwd", tmp / "tmpdir") == []


def test_sigkill_mid_run_resumes_from_the_bucket_bitwise(straight, compile_cache,
                                                        tmp_path):
  wd = f"{B}/killed"
  env = _env(tmp_path, compile_cache)
  killed = _runner(_spec(wd, kill_at_step=3), tmp_path, env)
  assert killed.returncode == -9, killed.stderr[-3000:]
  assert {n.split("/")[1] for n in _objects("killed")
          if n.startswith("checkpoints/")} == {"2"}
  assert runstate.read(wd).state == "running"  # resumable
  train_runner.run(_spec(wd))  # the same run, resumed (here, in-process)
  s1, p1 = train_runner.final_params(straight[0])
  s2, p2 = train_runner.final_params(wd)
  assert s1 == s2 == 6
  train_runner.assert_bitwise_equal(p1, p2)
  # Both attempts' parts read as one log: the killed attempt logged step 3,
  # the resumed one redid it from checkpoint 2 and logged it again.
  steps = [r["step"] for r in metrics.read_jsonl(wd + "/metrics.jsonl", "train")
           if "loss" in r]
  assert steps == [3, 3, 6]


def test_sigterm_saves_to_the_bucket_then_resumes_bitwise(straight,
                                                          compile_cache,
                                                          tmp_path):
  del compile_cache, tmp_path  # in-process: the module's XLA cache is set
  wd = f"{B}/preempted"
  # SIGTERM while fetching step 2's batch: step 2 runs, then it saves step 3.
  train_runner.run(_spec(wd, kill_at_step=2, kill_signal="SIGTERM"))
  status = runstate.read(wd)
  assert status.state == "preempted" and status.step == 3
  assert {n.split("/")[1] for n in _objects("preempted")
          if n.startswith("checkpoints/")} == {"2", "3"}
  train_runner.run(_spec(wd))
  s1, p1 = train_runner.final_params(straight[0])
  s2, p2 = train_runner.final_params(wd)
  assert s1 == s2 == 6
  train_runner.assert_bitwise_equal(p1, p2)
  assert runstate.read(wd).state == "done"


# ----------------------------------------------------------------------------
# Bad workdirs: one line, exit 2, after the config checks, before any compile.


def _bad_workdir(workdir, cwd, env_extra=(), env_drop=()):
  env = {k: v for k, v in os.environ.items() if k not in env_drop}
  env.update(dict(env_extra), PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
  # On mock data (sweep.mock_main), so that the config passes its checks.
  proc = subprocess.run(
      [sys.executable, "-m", "softattn.sweep.mock_main",
       f"--config={os.path.join(REPO, QUICK)}", f"--workdir={workdir}"],
      cwd=cwd, env=env, capture_output=True, text=True, timeout=90)
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  assert proc.returncode == 2, proc.stderr[-2000:]
  # TF's start-up may log before it (as tests/test_cli.py allows); the error
  # itself is the last line, said once, with no traceback.
  assert "Traceback" not in proc.stderr and not proc.stdout.strip(), lines
  assert lines[-1].startswith("workdir error: "), lines
  assert sum("workdir error" in l for l in lines) == 1, lines
  assert "step 1" not in proc.stderr  # nothing trained, nothing compiled
  return lines[-1]


def _check_in_process(workdir, url, monkeypatch, timeout_s):
  """``workdir_check``'s line with gcsfs pointed at ``url`` (what main prints
  after ``workdir error: ``; the command line itself is tested above)."""
  from softattn import workdir_check  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
  gcs_emulator.filesystem()  # drops the cached client of the real emulator
  try:
    with pytest.raises(paths.PathError) as e:
      workdir_check.check_writable(workdir, timeout_s=timeout_s)
  finally:
    monkeypatch.undo()
    gcs_emulator.filesystem()
  assert "\n" not in str(e.value)
  return str(e.value)


def test_a_bucket_that_does_not_exist_is_one_line(gcs, tmp_path):
  line = _bad_workdir("gs://no-such-bucket/run", tmp_path)
  assert "gs://no-such-bucket does not exist" in line
  # The check did not create the bucket (gcsfs' mkdir of a bucket would).
  assert not gcs_emulator.filesystem().exists("no-such-bucket")


def test_an_unreachable_gcs_host_is_one_line_within_the_timeout(gcs,
                                                               monkeypatch):
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as s:  # a loopback port nobody listens on
    s.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{s.getsockname()[1]}"
  line = _check_in_process(f"{B}/run", closed, monkeypatch, timeout_s=3)
  assert f"no answer from {closed}" in line


def test_missing_credentials_are_one_line(gcs, tmp_path):
  # No emulator, no credentials file, a HOME without gcloud's: what a VM
  # without a service account (or a laptop never logged in) has.
  line = _bad_workdir(f"{B}/run", tmp_path, env_extra={
      "HOME": str(tmp_path)}, env_drop=(
          "STORAGE_EMULATOR_HOST", "FSSPEC_GS_TOKEN",
          "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG"))
  assert "no Google Cloud credentials found" in line


def test_an_unwritable_local_workdir_is_one_line(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a folder")
  line = _bad_workdir(str(blocker / "run"), tmp_path)
  assert "cannot write the workdir here" in line
  # chmod cannot stop root (CI runs as root): a read-only folder, if not root.
  if os.geteuid() != 0:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    assert "cannot write" in _bad_workdir(str(ro / "run"), tmp_path)


# ----------------------------------------------------------------------------
# A sweep directory on a bucket.

PAUSED = "depth-1__normalizer-softmax"


def test_sweep_on_a_bucket_resumes_the_preempted_run_skips_done_and_reports(
    gcs, compile_cache, tmp_path, capsys, monkeypatch):
  from softattn.sweep import __main__ as cli  # pylint: disable=g-import-not-at-top
  sweep = f"{B}/sweep"
  cmd = [sys.executable, "-m", "softattn.sweep", "run",
         os.path.join(REPO, "configs/sweeps/smoke.py"), "--mock_data",
         "--workdir", sweep, "--only", PAUSED]
  env = dict(_env(tmp_path, compile_cache), SOFTATTN_MOCK_PAUSE=f"{PAUSED}:3")
  proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  marker = f"{sweep}/{PAUSED}/.mock_paused"  # written at step 3, in the bucket
  deadline = time.time() + 180
  while time.time() < deadline and proc.poll() is None and \
      not paths.exists(marker):
    time.sleep(0.5)
  if not paths.exists(marker):
    proc.kill()
    pytest.fail("the run never reached step 3:\n" + proc.communicate()[0][-3000:])
  proc.send_signal(signal.SIGTERM)  # the runner stops its run: SIGTERM
  out, _ = proc.communicate(timeout=120)
  assert proc.returncode == 130, out
  status = runstate.read(f"{sweep}/{PAUSED}")
  assert status.state == "preempted" and status.step == 4, status

  res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=240)
  assert res.returncode == 0, res.stdout + res.stderr[-3000:]
  assert f"resume {PAUSED}: stopped at step 4" in res.stdout, res.stdout
  # sweep.log (the child's output, piped into rolled parts) shows the resume.
  log = paths.read_log(f"{sweep}/{PAUSED}/sweep.log").decode()
  assert "mock_main: paused at step 3" in log
  assert "Resumed from checkpoint step 4" in log
  train = [r["step"] for r in metrics.read_jsonl(
      f"{sweep}/{PAUSED}/metrics.jsonl", "train")]
  assert train == [1, 2, 3, 4, 5, 6]  # each step trained exactly once

  monkeypatch.chdir(tmp_path)
  assert cli.main(cmd[3:]) == 0  # in-process: nothing left to run
  assert f"skip {PAUSED}: done" in capsys.readouterr().out
  assert cli.main(["report", sweep]) == 0
  text = paths.read_text(f"{sweep}/results.csv")
  header, *lines = [l.split(",") for l in text.strip().splitlines()]
  rows = {l[0]: dict(zip(header, l)) for l in lines}
  assert len(rows) == 4 and rows[PAUSED]["state"] == "done"
  assert int(rows[PAUSED]["steps"]) == 6
  assert sorted(r["state"] for n, r in rows.items() if n != PAUSED) == [
      "not_started"] * 3
  assert paths.exists(f"{sweep}/results.md") and paths.exists(
      f"{sweep}/fits.json")
  assert paths.read_bytes(f"{sweep}/scaling.png")[:8] == b"\x89PNG\r\n\x1a\n"
  assert _local_files(tmp_path / "tmpdir") == []


# ----------------------------------------------------------------------------
# A TFDS data_dir on a bucket.

DATASET = "gcs_digits"


def _store_dataset(data_dir: str) -> None:
  """80 train / 16 test id images in 3 shards each, stored shuffled: TFDS
  interleaves the files on reading, the order the gs:// reader must
  reproduce."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  tiny_data.store_id_dataset(
      DATASET, data_dir, range(80), range(100, 116),
      download_config=tfds.download.DownloadConfig(num_shards=3))


def test_the_input_pipeline_reads_a_tfds_data_dir_in_the_bucket(
    gcs, tmp_path, monkeypatch):
  import ml_collections  # pylint: disable=g-import-not-at-top
  from softattn import data  # pylint: disable=g-import-not-at-top
  from softattn.data import pipeline  # pylint: disable=g-import-not-at-top
  local = str(tmp_path / "tfds")
  _store_dataset(local)
  fs = gcs_emulator.filesystem()
  fs.put(f"{local}/{DATASET}", f"{gcs_emulator.BUCKET}/tfds/", recursive=True)
  shards = [n for n in _objects("tfds") if "train.tfrecord" in n]
  assert len(shards) == 3, _objects("tfds")

  def config(data_dir):
    return ml_collections.ConfigDict(dict(
        name=DATASET, data_dir=data_dir, train_split="train",
        eval_split="test", pp_train="value_range(-1, 1)",
        pp_eval="value_range(-1, 1)", shuffle_buffer=100, cache=False))
  here, there = config(local), config(f"{B}/tfds")
  assert data.dataset_info(there) == data.dataset_info(here) == dict(
      num_classes=4, image_shape=(8, 8, 1), num_train=80, num_eval=16)

  def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
      x, y = np.asarray(a[k]), np.asarray(b[k])
      assert x.dtype == y.dtype and np.array_equal(x, y), k

  # Train batches: the same examples in the same order, bitwise.
  it_here = data.make_train_iter(here, global_batch_size=16, seed=0)
  it_there = data.make_train_iter(there, global_batch_size=16, seed=0)
  for _ in range(6):  # more than one epoch of 80
    same(next(it_here), next(it_there))
  # Each of two processes' slices (tfds.even_splits: a skip/take per file).
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  monkeypatch.setattr(pipeline.multihost_utils, "process_allgather",
                      lambda n: np.asarray([40, 40]))
  for index in (0, 1):
    monkeypatch.setattr(jax, "process_index", lambda index=index: index)
    a = list(data.eval_dataset(here, "train", local_batch_size=16)
             .as_numpy_iterator())
    b = list(data.eval_dataset(there, "train", local_batch_size=16)
             .as_numpy_iterator())
    assert len(a) == len(b) == 3
    for x, y in zip(a, b):
      same(x, y)


def test_the_aot_launch_table_writes_to_the_bucket(gcs, capsys):
  from softattn.aot import table  # pylint: disable=g-import-not-at-top
  out = f"{B}/docs/scale.md"
  table.main(out, only="no-such-row")  # compiles nothing: every row pending
  assert f"wrote {out} (0 of {len(table.ROWS)} rows)" in capsys.readouterr().out
  assert paths.read_text(out).startswith("# Launch table")
  assert _objects("docs") == ["scale.md"]  # and nothing else


def test_a_bucket_that_refuses_this_account_is_one_line(gcs, monkeypatch):
  # A server on 127.0.0.1 answering every request as GCS answers an account
  # without access to the bucket: 403 with GCS' JSON error body.
  import http.server  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top

  class Refuse(http.server.BaseHTTPRequestHandler):

    def _refuse(self):
      body = json.dumps({"error": {"code": 403, "message": (
          "robot@x.iam.gserviceaccount.com does not have "
          "storage.objects.create access to the Google Cloud Storage "
          "object.")}}).encode()
      self.send_response(403)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(body)))
      self.end_headers()
      self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _refuse

    def log_message(self, *args):
      del args

  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  try:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    line = _check_in_process(f"{B}/run", url, monkeypatch, timeout_s=20)
  finally:
    server.shutdown()
    server.server_close()
  assert "permission denied on gs://bucket" in line
  assert "storage.objects.create" in line
