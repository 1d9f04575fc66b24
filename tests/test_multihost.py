"""Multi-host rehearsal on localhost: two processes of 4 fake CPU devices each.

Each process runs the real command line (``python -m softattn.main
--config.multihost=True --coordinator_address=127.0.0.1:<port>
--num_processes=2 --process_id=<p>``, through tests/multihost_runner.py's
probes); they join through ``jax.distributed`` and gloo CPU collectives over
the loopback interface into one 8-device mesh, with parameters and optimizer
state FSDP-sharded across both (tests/multihost_config.py).

The dataset is written here: 64 train and 16 test 8x8 images, each carrying
its example id in pixel ``[0, 0, 0]``, so the probes can say which examples
each process put in each batch. Runs (module fixture ``runs``):

* ``one``: one process with 8 devices, fed the global batches a 2-process run
  assembles (the data order depends on the number of processes by design:
  each reads its own slice of the files with its own seed; the runner replays
  both slices in one process);
* ``two``: two processes, uninterrupted;
* ``killed``: two processes; process 1 SIGKILLs itself after step 3
  (checkpoint 2 saved); process 0 fails at its next collective; then both are
  restarted with the same command.

Every subprocess has a timeout; traffic goes to 127.0.0.1 only (checked).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import psutil  # a dependency of orbax-checkpoint and tensorflow-datasets
import pytest

from softattn import metrics, multihost, runstate

sys.path.insert(0, os.path.dirname(__file__))
import gcs_emulator  # pylint: disable=g-import-not-at-top,wrong-import-position
import multihost_config  # pylint: disable=g-import-not-at-top,wrong-import-position
import tiny_data  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(REPO, "tests", "multihost_runner.py")
STEPS, BATCH, NUM_TRAIN = 4, 16, 64
KILL_AT = 3  # process 1 dies when asked for the batch of step index 3
TIMEOUT_S = 300  # per launch; a healthy launch takes ~20 s on 2 idle cores
# The module fixture makes four launches, each bounded by TIMEOUT_S; the first
# test that uses it is charged for them, so its bound is theirs, not
# pyproject's 900 s a test.
pytestmark = pytest.mark.timeout(5 * TIMEOUT_S)


def _make_dataset(data_dir: str) -> None:
  """64 train / 16 test id images, stored in id order."""
  tiny_data.store_id_dataset(multihost_config.DATASET, data_dir,
                             range(NUM_TRAIN), range(100, 116),
                             disable_shuffling=True)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int, cache_dir: str) -> dict:
  env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
  env.update(XLA_FLAGS=tiny_data.xla_flags(devices=devices),
             JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3",
             # The three 2-process launches compile the same programs.
             JAX_COMPILATION_CACHE_DIR=cache_dir,
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             PYTHONPATH=os.pathsep.join(
                 [REPO] + [p for p in [env.get("PYTHONPATH")] if p]))
  return env


class Launch:
  """The processes of one run, started together, each with a log file."""

  def __init__(self, tmp, name: str, data_dir: str, workdir: str,
               probes: list[dict], num_processes: int | None):
    self.logs, self.procs = [], []
    port = _free_port()
    for p, probe in enumerate(probes):
      args = [sys.executable, RUNNER, json.dumps(probe),
              f"--config={os.path.join(REPO, 'tests', 'multihost_config.py')}",
              f"--config.data.data_dir={data_dir}", f"--workdir={workdir}"]
      if num_processes:
        args += ["--config.multihost=True",
                 f"--coordinator_address=127.0.0.1:{port}",
                 f"--num_processes={num_processes}", f"--process_id={p}"]
      log = open(tmp / f"{name}.{p}.log", "w+", encoding="utf-8")
      self.logs.append(log)
      self.procs.append(subprocess.Popen(
          args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
          env=_env(8 // len(probes), str(tmp / "xla_cache"))))

  def tail(self) -> str:
    out = []
    for p, log in enumerate(self.logs):
      log.seek(0)
      out.append(f"--- process {p} ---\n" + log.read()[-3000:])
    return "\n".join(out)

  def wait(self, p: int, timeout: float = TIMEOUT_S) -> int:
    try:
      return self.procs[p].wait(timeout)
    except subprocess.TimeoutExpired:
      self.kill()
      pytest.fail(f"process {p} still running after {timeout} s\n{self.tail()}")

  def wait_all(self) -> list[int]:
    codes = [self.wait(p) for p in range(len(self.procs))]
    if any(codes):
      pytest.fail(f"exit codes {codes}\n{self.tail()}")
    return codes

  def kill(self):
    for proc in self.procs:
      if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def _inet_endpoints(procs) -> set[str]:
  """Local and remote IPs of the processes' TCP/UDP sockets right now."""
  ips = set()
  for proc in procs:
    try:
      conns = psutil.Process(proc.pid).net_connections(kind="inet")
    except psutil.Error:  # exited meanwhile
      continue
    for c in conns:
      ips.update(a.ip for a in (c.laddr, c.raddr) if a)
  return ips


def _status(workdir) -> tuple[str | None, str | None, int | None]:
  """``(state, message, step)`` of ``status.json``, in its old or runstate form."""
  try:
    with open(os.path.join(workdir, "status.json"), encoding="utf-8") as f:
      d = json.load(f)
  except FileNotFoundError:
    return None, None, None
  return (d.get("state", d.get("status")), d.get("message", d.get("reason")),
          d.get("step"))


def _records(path) -> list[dict]:
  return [json.loads(l) for l in open(path, encoding="utf-8")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("multihost")
  data_dir = str(tmp / "tfds")
  _make_dataset(data_dir)
  out = {"tmp": tmp, "data_dir": data_dir}

  one = Launch(tmp, "one", data_dir, str(tmp / "one"),
               [{"record": str(tmp / "one.rec0"), "replay_processes": 2}],
               num_processes=None)
  one.wait_all()

  probes = [{"record": str(tmp / f"two.rec{p}"),
             "audit": str(tmp / f"two.audit{p}")} for p in range(2)]
  two = Launch(tmp, "two", data_dir, str(tmp / "two"), probes, num_processes=2)
  out["pids"] = [p.pid for p in two.procs]
  ips, deadline = set(), time.time() + TIMEOUT_S
  while time.time() < deadline and any(p.poll() is None for p in two.procs):
    ips |= _inet_endpoints(two.procs)
    time.sleep(0.2)
  out["ips"] = ips
  two.wait_all()

  wd = str(tmp / "killed")
  killed = Launch(tmp, "killed", data_dir, wd,
                  [{}, {"kill_at_step": KILL_AT}], num_processes=2)
  out["victim_code"] = killed.wait(1)
  # The survivor fails at its next collective (gloo: connection reset) and
  # says so in status.json (jax 0.10), or jax's coordination agent ends the
  # process at once when its peer disappears (jax 0.12); otherwise jax would
  # abort it only after the coordination
  # service's heartbeat timeout (100 s), so, like a cluster scheduler
  # restarting a job, the test kills it then.
  deadline = time.time() + TIMEOUT_S
  while (time.time() < deadline and killed.procs[0].poll() is None
         and _status(wd)[0] != "failed"):
    time.sleep(0.5)
  out["survivor_status"] = _status(wd)
  out["survivor_exited"] = killed.procs[0].poll() is not None
  killed.kill()
  out["after_kill"] = sorted(os.listdir(os.path.join(wd, "checkpoints")))
  Launch(tmp, "restarted", data_dir, wd, [{}, {}], num_processes=2).wait_all()
  return out


def _train_losses(workdir) -> list[tuple[int, float]]:
  return [(r["step"], r["loss"]) for r in
          metrics.read_jsonl(f"{workdir}/metrics.jsonl", "train")]


def _restore_params(workdir):
  """The latest checkpoint's params, restored whole on this process's device."""
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  with ocp.CheckpointManager(f"{workdir}/checkpoints",
                             item_handlers=ocp.StandardCheckpointHandler()) as m:
    step = m.latest_step()
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
        m.item_metadata(step))
    state = m.restore(step, args=ocp.args.StandardRestore(target))
  return step, jax.tree.map(np.asarray, state["params"])


def test_each_process_reads_only_its_own_slice(runs):
  recs = [_records(runs["tmp"] / f"two.rec{p}") for p in range(2)]
  half = NUM_TRAIN // 2
  for p, own in enumerate([set(range(half)), set(range(half, NUM_TRAIN))]):
    assert [r["step"] for r in recs[p]] == list(range(STEPS))
    seen = [i for r in recs[p] for i in r["local_ids"]]
    assert all(len(r["local_ids"]) == BATCH // 2 for r in recs[p])
    # 4 steps of 8 local examples: exactly one pass over its own 32, in a
    # shuffled order, nothing from the other process's half.
    assert sorted(seen) == sorted(own) and seen != sorted(seen)
  for r0, r1 in zip(*recs):
    assert not set(r0["local_ids"]) & set(r1["local_ids"])


def test_global_batch_is_assembled_from_the_process_parts(runs):
  recs = [_records(runs["tmp"] / f"two.rec{p}") for p in range(2)]
  replayed = _records(runs["tmp"] / "one.rec0")
  for step, (r0, r1, ref) in enumerate(zip(*recs, replayed)):
    # Gathered across processes, the global array is process 0's rows then
    # process 1's (the mesh's device order), the same on both processes, and
    # the batch the one-process run trained on at that step.
    assert r0["global_ids"] == r0["local_ids"] + r1["local_ids"], step
    assert r1["global_ids"] == r0["global_ids"] == ref["global_ids"], step


def test_losses_match_one_process_with_eight_devices(runs):
  two, one = _train_losses(runs["tmp"] / "two"), _train_losses(runs["tmp"] / "one")
  assert [s for s, _ in two] == [s for s, _ in one] == list(range(1, STEPS + 1))
  # Equal to float32 rounding, not bitwise: gloo's all-reduce sums in another
  # order than the in-process one. (Adam's m/sqrt(v) turns rounding in
  # near-zero gradients into ~1e-6 parameter differences; a wrong batch moves
  # them by ~lr = 2e-3.)
  np.testing.assert_allclose([l for _, l in two], [l for _, l in one],
                             rtol=1e-6)
  assert len({l for _, l in two}) > 2  # the loss moves, so equality says something
  evals = [metrics.read_jsonl(str(runs["tmp"] / w / "metrics.jsonl"), "eval")[-1]
           for w in ("two", "one")]
  assert evals[0]["num_examples"] == evals[1]["num_examples"] == 16
  np.testing.assert_allclose(evals[0]["loss"], evals[1]["loss"], rtol=1e-6)
  (s2, p2), (s1, p1) = (_restore_params(runs["tmp"] / w) for w in ("two", "one"))
  assert s1 == s2 == STEPS
  for a, b in zip(jax.tree.leaves(p2), jax.tree.leaves(p1)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_only_process_zero_writes_metrics_and_status(runs):
  wd = runs["tmp"] / "two"
  audit = [set(open(runs["tmp"] / f"two.audit{p}", encoding="utf-8").read()
               .split()) for p in range(2)]
  # status.json and config.json are written whole (a renamed .tmp).
  assert {"metrics.jsonl", "status.json.tmp", "config.json.tmp"} <= audit[0]
  # Process 1: its checkpoint shards, and the start-up check's probe object
  # (softattn.paths.check_writable: every host must reach the workdir).
  assert audit[1] and all(f.startswith(("checkpoints/", ".write_check."))
                          for f in audit[1]), audit[1]
  events = [f for f in os.listdir(wd) if f.startswith("events.out.tfevents")]
  # TensorBoard names its file ...<host>.<pid>.<n>: one file, process 0's.
  assert len(events) == 1 and f".{runs['pids'][0]}." in events[0], events
  assert [s for s, _ in _train_losses(wd)] == list(range(1, STEPS + 1))
  assert _status(wd)[0] == "done"


def test_orbax_checkpoints_are_written_by_both_processes_and_restore(runs):
  item = runs["tmp"] / "two" / "checkpoints" / str(STEPS) / "default"
  for p in range(2):
    assert os.listdir(item / f"ocdbt.process_{p}" / "d"), p  # its own shards
  audit1 = open(runs["tmp"] / "two.audit1", encoding="utf-8").read()
  assert f"checkpoints/{STEPS}" in audit1 and "process_1" in audit1
  # Restored whole here, on one device (the multi-process restore is the
  # resume in test_sigkill_...).
  _, params = _restore_params(runs["tmp"] / "two")
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))


def test_sigkill_one_process_then_restart_both_is_bitwise_identical(runs):
  assert runs["victim_code"] == -signal.SIGKILL
  state, message, step = runs["survivor_status"]
  # Either the survivor recorded its failure at the step the peer died, or
  # jax ended it first and status.json still says where it was (resumable).
  assert step == KILL_AT, runs["survivor_status"]
  assert (state == "failed" and message) or (
      runs["survivor_exited"] and state == "running"), runs["survivor_status"]
  assert runs["after_kill"] == ["2"]
  wd = runs["tmp"] / "killed"
  # Steps 1-3 before the kill, then 3-4 again after resuming from step 2.
  losses = _train_losses(wd)
  assert [s for s, _ in losses] == [1, 2, 3, 3, 4]
  assert losses[2][1] == losses[3][1]
  assert _status(wd)[0] == "done"
  (s1, p1), (s2, p2) = (_restore_params(runs["tmp"] / w)
                        for w in ("two", "killed"))
  assert s1 == s2 == STEPS
  for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
    assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8),
                                                 b.view(np.uint8))


def test_a_gs_workdir_holds_both_processes_shards_and_restores(runs):
  # The same two-process run with its workdir in a bucket on 127.0.0.1
  # (tests/gcs_emulator.py): each process writes its own Orbax shards there,
  # then a restart of both restores from the bucket.
  bucket = gcs_emulator.BUCKET
  with gcs_emulator.running(bucket):
    wd = f"gs://{bucket}/multihost"
    Launch(runs["tmp"], "gcs", runs["data_dir"], wd, [{}, {}],
           num_processes=2).wait_all()
    fs = gcs_emulator.filesystem()
    item = f"{bucket}/multihost/checkpoints/{STEPS}/default"
    for p in range(2):
      assert fs.find(f"{item}/ocdbt.process_{p}/d"), p  # its own shards
    assert runstate.read(wd).state == "done"
    assert _train_losses(wd) == _train_losses(runs["tmp"] / "two")
    (s1, p1), (s2, p2) = (_restore_params(w) for w in (runs["tmp"] / "two", wd))
    assert s1 == s2 == STEPS
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # Both processes restore the state from the bucket and only evaluate:
    # the same eval loss again, no step trained twice.
    Launch(runs["tmp"], "gcs_again", runs["data_dir"], wd, [{}, {}],
           num_processes=2).wait_all()
    evals = metrics.read_jsonl(f"{wd}/metrics.jsonl", "eval")
    assert [r["step"] for r in evals] == [STEPS, STEPS]
    assert evals[0]["loss"] == evals[1]["loss"]
    assert [s for s, _ in _train_losses(wd)] == list(range(1, STEPS + 1))
    assert runstate.read(wd).state == "done"


def test_traffic_stays_on_loopback(runs):
  assert runs["ips"], "no socket of the two processes was ever seen"
  assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1")
             for ip in runs["ips"]), runs["ips"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_processes=2), "missing: \\['process_id'\\]"),
    (dict(coordinator_address="127.0.0.1:1", process_id=0),
     "missing: \\['num_processes'\\]"),
    (dict(num_processes=2, process_id=0), "coordinator_address"),
    (dict(coordinator_address="127.0.0.1:1", num_processes=2, process_id=2),
     "must be in \\[0, 2\\)"),
])
def test_partial_coordinates_are_one_line_errors(kwargs, match, monkeypatch):
  monkeypatch.delenv("JAX_COORDINATOR_ADDRESS", raising=False)
  with pytest.raises(multihost.MultihostError, match=match):
    multihost.initialize(**kwargs)


def test_loopback_addresses():
  assert multihost.is_loopback("127.0.0.1:1234")
  assert multihost.is_loopback("localhost:1234")
  assert multihost.is_loopback("[::1]:1234")
  assert not multihost.is_loopback("10.0.0.1:1234")
  assert not multihost.is_loopback("tpu-host-0:8476")


def test_initialize_after_a_jax_computation_is_refused():
  jax.devices()  # the backend exists now
  with pytest.raises(RuntimeError, match="before any JAX computation"):
    multihost.initialize("127.0.0.1:1", num_processes=2, process_id=0)
  assert not jax.distributed.is_initialized()
