"""Faults around `prepare imagenet21k`: a killed parent, a cut release tar.

* A SIGKILLed parent must not leave its worker processes (~1 GiB each, up
  to 32) or the resource tracker running forever; they must go within
  seconds (``softattn.data.orphans``, also checked alone, both ways).
* A release tar cut exactly at a member boundary must not build a dataset of
  the synsets before the cut: Python's tarfile reads the missing
  end-of-archive blocks as the end, so only an explicit check catches it.
  The same holds for the gzipped release and for each synset tar.

The source is four synsets of two 8x8 JPEGs: the subject is the
bookkeeping, not the images (tests/test_imagenet21k.py builds the real
miniature).
"""

import gzip
import io
import os
import signal
import subprocess
import sys
import tarfile
import time

import numpy as np
import psutil
import pytest
from PIL import Image

from softattn.data import __main__ as cli
from tests.test_imagenet21k import _tar_bytes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WNIDS = [f"n0000000{i}" for i in range(1, 5)]
# TF_ENABLE_ONEDNN_OPTS=0: TensorFlow's import prints a oneDNN notice to
# stderr otherwise, which would hide whether the command's error is one line.
ENV = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2",
           TF_ENABLE_ONEDNN_OPTS="0", JAX_PLATFORMS="cpu")


def _synset_tars() -> dict:
  """``{"<wnid>.tar": synset tar bytes}``: two tiny JPEGs per synset."""
  rng = np.random.default_rng(0)
  tars = {}
  for wnid in WNIDS:
    images = {}
    for i in range(2):
      out = io.BytesIO()
      Image.fromarray(rng.integers(0, 256, (8, 8, 3), np.uint8)).save(
          out, "JPEG")
      images[f"{wnid}_{i}.JPEG"] = out.getvalue()
    tars[f"{wnid}.tar"] = _tar_bytes(images)
  return tars


def _cut_at_member(data: bytes, index: int) -> tuple[bytes, str]:
  """``data`` up to the header of member ``index`` (a clean member
  boundary), and the name of the last member left whole."""
  with tarfile.open(fileobj=io.BytesIO(data)) as t:
    members = t.getmembers()
  return data[:members[index].offset], members[index - 1].name


# ------------------------------------------------ 6: a SIGKILLed parent


_BLOCK_AFTER_FIRST_TASK = """
import os, sys, time
import psutil
import pytest
from softattn.data import imagenet21k
def mark_then_wait(path, result):
  # The pool is running: name every process below this one, then hang here
  # (as a build does for hours) until the test kills this process.
  pids = [p.pid for p in psutil.Process().children(recursive=True)]
  with open(sys.argv[3] + '.tmp', 'w') as f:
    f.write(' '.join(map(str, pids)))
  os.replace(sys.argv[3] + '.tmp', sys.argv[3])
  while True:
    time.sleep(60)
imagenet21k._mark = mark_then_wait
imagenet21k.prepare(sys.argv[1], sys.argv[2], processes=2, num_shards=2,
                    task_bytes=1, log=lambda _: None)
"""


def _running(pid: int) -> bool:
  """Alive and not a zombie (a zombie is dead, waiting to be reaped)."""
  try:
    return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


def _wait_for(cond, timeout_s: float, what: str) -> None:
  deadline = time.monotonic() + timeout_s
  while not cond():
    assert time.monotonic() < deadline, f"timed out waiting for {what}"
    time.sleep(0.05)


def test_sigkilled_parent_takes_its_workers_along(tmp_path):
  (tmp_path / "tars").mkdir()
  for name, data in _synset_tars().items():
    (tmp_path / "tars" / name).write_bytes(data)
  pid_file = tmp_path / "children"
  parent = subprocess.Popen(
      [sys.executable, "-c", _BLOCK_AFTER_FIRST_TASK, str(tmp_path / "tars"),
       str(tmp_path / "tfds"), str(pid_file)], env=ENV,
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  children = []
  try:
    _wait_for(lambda: pid_file.exists() or parent.poll() is not None, 120,
              "the first encode task")
    assert pid_file.exists(), parent.stderr.read().decode()[-2000:]
    children = [int(p) for p in pid_file.read_text().split()]
    # Two workers (a task each), and the resource tracker of their queues.
    assert len(children) == 3 and all(map(_running, children)), children
    assert any("resource_tracker" in " ".join(psutil.Process(p).cmdline())
               for p in children)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    _wait_for(lambda: not any(map(_running, children)), 10,
              f"the workers {children} to exit with their parent")
  finally:
    if parent.poll() is None:
      parent.kill()
      parent.wait()
    parent.stderr.close()
    for pid in children:  # what today's code left behind
      if _running(pid):
        os.kill(pid, signal.SIGKILL)


_WORKER = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("orphans", sys.argv[1])
orphans = importlib.util.module_from_spec(spec)
spec.loader.exec_module(orphans)  # alone: softattn.data would import TF
if sys.argv[2] == "poll":  # the fallback where prctl is missing
  orphans._kill_on_parent_death = lambda: False
  orphans.POLL_S = 0.05
orphans.exit_with_parent(int(sys.argv[3]))
print("ready", flush=True)
time.sleep(600)
"""

_MIDDLE = """
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2],
                           sys.argv[3], str(os.getpid())],
                          stdout=subprocess.PIPE, text=True)
assert worker.stdout.readline() == "ready\\n"
print(worker.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("mode", ["prctl", "poll"])
def test_exit_with_parent_both_ways(mode):
  """``orphans.exit_with_parent`` alone, in a plain process under a
  SIGKILLed parent: with the kernel's death signal and with the polling
  fallback (the path other platforms take)."""
  path = os.path.join(REPO, "softattn", "data", "orphans.py")
  middle = subprocess.Popen(
      [sys.executable, "-c", _MIDDLE, _WORKER, path, mode],
      stdout=subprocess.PIPE, text=True)
  worker = None
  try:
    worker = int(middle.stdout.readline())
    assert _running(worker)
    middle.kill()
    middle.wait(timeout=30)
    _wait_for(lambda: not _running(worker), 5, f"worker {worker} to exit")
  finally:
    if middle.poll() is None:
      middle.kill()
      middle.wait()
    middle.stdout.close()
    if worker and _running(worker):
      os.kill(worker, signal.SIGKILL)


# ------------------------------------------------ 7: a cut release tar


def test_release_tar_cut_at_a_member_boundary_is_an_error(tmp_path):
  release = _tar_bytes(_synset_tars())
  cut, last = _cut_at_member(release, 2)
  assert last == f"{WNIDS[1]}.tar"
  source = tmp_path / "fall11_whole.tar"
  source.write_bytes(cut)
  proc = subprocess.run(
      [sys.executable, "-m", "softattn.data", "prepare", "imagenet21k",
       "--source", str(source), "--data_dir", str(tmp_path / "tfds"),
       "--processes", "1"], env=ENV, capture_output=True, text=True,
      timeout=300, check=False)
  assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
  [line] = proc.stderr.splitlines()
  assert line.startswith(f"error: {source} is truncated") and last in line, line
  assert not proc.stdout
  assert not (tmp_path / "tfds" / "imagenet21k" / "1.0.0"
              / "dataset_info.json").exists()


def test_cut_gzipped_release_and_cut_synset_tar_are_errors(tmp_path, capsys):
  """The streamed (``.tar.gz``) path checks the same; so does each synset
  tar, whose images would otherwise go missing as quietly."""
  tars = _synset_tars()
  cut, last = _cut_at_member(_tar_bytes(tars), 3)
  gzipped = tmp_path / "winter21_whole.tar.gz"
  gzipped.write_bytes(gzip.compress(cut))
  args = ["prepare", "imagenet21k", "--data_dir", str(tmp_path / "tfds"),
          "--processes", "1", "--source"]
  assert cli.main(args + [str(gzipped)]) == 1
  err = capsys.readouterr().err
  assert err.startswith(f"error: {gzipped} is truncated") and last in err
  assert len(err.splitlines()) == 1, err

  folder = tmp_path / "tars"
  folder.mkdir()
  for name, data in tars.items():
    (folder / name).write_bytes(data)
  synset_cut, image = _cut_at_member(tars[f"{WNIDS[2]}.tar"], 1)
  (folder / f"{WNIDS[2]}.tar").write_bytes(synset_cut)
  assert cli.main(args + [str(folder)]) == 1
  err = capsys.readouterr().err
  assert f"cannot read synset {WNIDS[2]}" in err and image in err
  assert "end-of-archive" in err and len(err.splitlines()) == 1, err


def test_an_intact_release_tar_still_builds(tmp_path, capsys):
  source = tmp_path / "fall11_whole.tar"
  source.write_bytes(_tar_bytes(_synset_tars()))
  assert cli.main(["prepare", "imagenet21k", "--source", str(source),
                   "--data_dir", str(tmp_path / "tfds"),
                   "--processes", "1"]) == 0
  assert "8 images, 4 classes" in capsys.readouterr().out
