"""Runs ``train_and_evaluate`` on TFDS mock data; used by the training tests.

``python tests/train_runner.py '<json spec>'`` with keys:
  config: ``configs/<file>.py:<arg>``; overrides: ``{"a.b": value}``;
  workdir; num_examples (mock examples per split);
  kill_at_step: when the loop asks for the batch of this step, the process
    sends itself ``kill_signal`` (``SIGKILL`` or ``SIGTERM``): a preemption at a
    known point, after every earlier step and checkpoint;
  sigterm_in: ``[phase, step]``: SIGTERM arrives inside that phase of that
    step, after the loop has decided whether the step saves: ``"log"`` (its
    log line), ``"eval"`` (its evaluation) or ``"save"`` (its checkpoint
    save, which then completes);
  out: optional path; the final metrics are written there as JSON.

A separate process because XLA flags (fake devices) must be set before JAX is
imported and because SIGKILL ends the process. Also importable (``run``).
"""

import json
import os
import signal
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(spec: str):
  """``configs/<file>.py[:<arg>]`` (relative to the repository), unlocked."""
  from softattn import config_files  # pylint: disable=g-import-not-at-top
  return config_files.load_file(os.path.join(REPO, spec), lock=False)


def apply_overrides(config, overrides):
  for dotted, value in (overrides or {}).items():
    *parents, leaf = dotted.split(".")
    node = config
    for p in parents:
      node = node[p]
    with node.unlocked():
      node[leaf] = value
  return config


def run(spec: dict):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from softattn import data, train  # pylint: disable=g-import-not-at-top
  config = apply_overrides(load_config(spec["config"]), spec.get("overrides"))
  kill_at = spec.get("kill_at_step")
  if kill_at is not None:
    sig = getattr(signal, spec.get("kill_signal", "SIGKILL"))
    original = data.make_train_iter

    def killing_iter(*args, start_step, **kwargs):
      step = start_step
      for batch in original(*args, start_step=start_step, **kwargs):
        if step == kill_at:
          os.kill(os.getpid(), sig)
        yield batch
        step += 1
    data.make_train_iter = killing_iter
  undo = _sigterm_in(*spec["sigterm_in"]) if spec.get("sigterm_in") else None
  try:
    with tfds.testing.mock_data(num_examples=spec.get("num_examples", 16)):
      final = train.train_and_evaluate(config, spec["workdir"])
  finally:
    if kill_at is not None:
      data.make_train_iter = original
    if undo:
      undo()
  if spec.get("out"):
    with open(spec["out"], "w", encoding="utf-8") as f:
      json.dump(final, f)
  return final



def _sigterm_in(phase: str, at_step: int):
  """Makes the process SIGTERM itself inside ``phase`` of step ``at_step``;
  returns the function that undoes it."""
  from softattn import checkpointing, evaluate, train  # pylint: disable=g-import-not-at-top
  owner, name, step_of = {
      "log": (train, "_log_train", lambda a, kw: a[1]),
      "eval": (evaluate, "evaluate_all", lambda a, kw: int(a[2]["step"])),
      "save": (checkpointing.Checkpointer, "save", lambda a, kw: a[1]),
  }[phase]
  original = getattr(owner, name)

  def wrapped(*args, **kwargs):
    if step_of(args, kwargs) == at_step:
      os.kill(os.getpid(), signal.SIGTERM)
    return original(*args, **kwargs)

  setattr(owner, name, wrapped)
  return lambda: setattr(owner, name, original)


def final_params(workdir):
  """``(step, params as numpy)`` of a workdir's latest Orbax checkpoint
  (local or gs://)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  with ocp.CheckpointManager(os.path.join(os.fspath(workdir), "checkpoints")) as mngr:
    step = mngr.latest_step()
    state = mngr.restore(step, args=ocp.args.StandardRestore())
  return step, jax.tree.map(np.asarray, state["params"])


def assert_bitwise_equal(a, b):
  """Two pytrees of arrays are equal bit for bit (dtype, shape, bytes)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb) and la
  for x, y in zip(la, lb):
    assert x.dtype == y.dtype and x.shape == y.shape
    assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


if __name__ == "__main__":
  run(json.loads(sys.argv[1]))
