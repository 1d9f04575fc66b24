r"""``softattn.main`` on TFDS mock data: ``sweep run ... --mock_data``.

Smoke-tests a whole sweep (configs, overrides, checkpoints, report) before
spending real compute: every run trains on ``tfds.testing.mock_data`` (random
examples with the dataset's real shapes and label range), so nothing needs to
be downloaded or prepared. Accuracies are meaningless; compute numbers are real.

Environment:
  SOFTATTN_MOCK_EXAMPLES: mock examples per split (default 64).
  SOFTATTN_MOCK_PAUSE: ``<run name>:<step>``. That run pauses when the loop
    asks for the batch of ``<step>``, prints ``mock_main: paused at step
    <step>`` and waits (at most 120 s) for SIGTERM, which it then hands to the
    training loop's own handler: a preemption at a known point, used by the
    tests to interrupt a sweep mid-run. It pauses once (a marker file in the
    run's workdir), so the resumed run goes through.

Configs run here should set ``checkpoint_async=False``: mock_data patches the
file system globally while a dataset is opened, which races with Orbax's
background save thread.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time

from softattn import paths


def _workdir(argv) -> str | None:
  for i, a in enumerate(argv):
    if a.startswith("--workdir="):
      return a.split("=", 1)[1]
    if a == "--workdir" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _wait_for_sigterm(timeout_s: float, announce: str) -> None:
  """Prints ``announce``, blocks until SIGTERM, then passes it on to the
  handler installed before. The handler is in place before the line is
  printed: a caller that signals as soon as it reads the line would
  otherwise reach the previous handler alone and this wait would sit out
  its whole timeout (seen: the full-disk fault test took 127 s, not 7, in
  3 of 13 runs on a loaded machine; 0 of 7 with the handler first)."""
  got = threading.Event()
  previous = signal.getsignal(signal.SIGTERM)

  def handler(signum, frame):
    got.set()
    if callable(previous):
      previous(signum, frame)

  signal.signal(signal.SIGTERM, handler)
  try:
    print(announce, flush=True)
    deadline = time.time() + timeout_s
    while not got.is_set() and time.time() < deadline:
      time.sleep(0.05)
  finally:
    signal.signal(signal.SIGTERM, previous)


def _install_pause(run_name: str, step: int, workdir: str) -> None:
  from softattn import data  # pylint: disable=g-import-not-at-top
  marker = paths.join(workdir, ".mock_paused")
  original = data.make_train_iter

  def pausing_iter(*args, start_step, **kwargs):
    k = start_step
    for batch in original(*args, start_step=start_step, **kwargs):
      if k == step and not paths.exists(marker):
        paths.write_atomic(marker, "")
        _wait_for_sigterm(120.0, f"mock_main: paused at step {step} "
                          f"({run_name})")
      yield batch
      k += 1

  data.make_train_iter = pausing_iter


def main() -> None:
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  pause = os.environ.get("SOFTATTN_MOCK_PAUSE")
  workdir = _workdir(sys.argv[1:])
  if pause and workdir:
    name, _, step = pause.rpartition(":")
    if paths.path(workdir).name == name:
      _install_pause(name, int(step), workdir)
  n = int(os.environ.get("SOFTATTN_MOCK_EXAMPLES", "64"))
  with tfds.testing.mock_data(num_examples=n):
    runpy.run_module("softattn.main", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
  main()
