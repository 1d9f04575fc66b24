"""``python -m softattn.main`` with test probes; used by tests/test_multihost.py.

``python tests/multihost_runner.py '<json probes>' <softattn.main flags...>``
runs the real command line (flags, ``multihost.initialize``, the loop) after
installing, by the JSON keys:

  record: path; per training step one JSON line ``{"step", "local_ids",
    "global_ids"}``: the example ids in this process's rows of the batch and
    in the whole global batch as every process sees it (gathered across
    processes). Ids are written into the images of tests/test_multihost.py's
    dataset (pixel ``[0, 0, 0]``).
  kill_at_step: when the loop asks for this step's batch, the process sends
    itself SIGKILL (after every earlier step and checkpoint).
  replay_processes: ``n``; a single process feeds the loop the global batches
    an ``n``-process run assembles (each process's slice read in turn with
    ``softattn.data.train_dataset(shard=(p, n))``, concatenated in process
    order), so the two runs can be compared step for step.
  audit: path; at exit, the files under ``workdir`` this process opened for
    writing from Python (``sys.addaudithook``), one per line.
"""

import atexit
import json
import os
import signal
import sys

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P


def example_ids(images) -> list[int]:
  """Ids written into pixel ``[0, 0, 0]``, undoing ``value_range(-1, 1)``."""
  return np.rint((np.asarray(images) + 1.0) * 127.5).astype(int).tolist()


def _local_ids(images: jax.Array) -> list[int]:
  rows = {}
  for shard in images.addressable_shards:
    rows[shard.index[0].start or 0] = example_ids(shard.data)
  return [i for start in sorted(rows) for i in rows[start]]


def _record(batch, step: int, f) -> None:
  corner = batch["image"][:, 0, 0, 0]
  if jax.process_count() > 1:
    whole = multihost_utils.process_allgather(corner, tiled=True)
  else:
    whole = np.asarray(corner)
  f.write(json.dumps({"step": step, "process": jax.process_index(),
                      "local_ids": _local_ids(corner),
                      "global_ids": example_ids(whole)}) + "\n")
  f.flush()


def _replayed_train_iter(n: int):
  from softattn import data  # pylint: disable=g-import-not-at-top

  def make_train_iter(data_config, *, global_batch_size, seed, start_step=0,
                      mesh=None):
    streams = [data.train_dataset(
        data_config, local_batch_size=global_batch_size // n, seed=seed,
        start_step=start_step, shard=(p, n)).as_numpy_iterator()
               for p in range(n)]
    sharding = NamedSharding(mesh, P("data"))
    for parts in zip(*streams):
      yield {k: jax.make_array_from_process_local_data(
          sharding, np.concatenate([p[k] for p in parts])) for k in parts[0]}
  return make_train_iter


def install(probes: dict, workdir: str) -> None:
  from softattn import data  # pylint: disable=g-import-not-at-top
  make_iter = data.make_train_iter
  if probes.get("replay_processes"):
    make_iter = _replayed_train_iter(int(probes["replay_processes"]))
  record = open(probes["record"], "a", encoding="utf-8") if probes.get(
      "record") else None
  kill_at = probes.get("kill_at_step")

  def probed_train_iter(*args, start_step=0, **kwargs):
    step = start_step
    for batch in make_iter(*args, start_step=start_step, **kwargs):
      if step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
      if record is not None:
        _record(batch, step, record)
      yield batch
      step += 1
  data.make_train_iter = probed_train_iter

  if probes.get("audit"):
    root = os.path.abspath(workdir) + os.sep
    written = set()

    def hook(event, args):
      if event == "open" and isinstance(args[0], str):
        mode, flags = args[1] or "", args[2] or 0
        if (any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR)
            ) and os.path.abspath(args[0]).startswith(root):
          written.add(os.path.relpath(args[0], root))
    sys.addaudithook(hook)

    def dump():
      with open(probes["audit"], "w", encoding="utf-8") as f:
        f.write("\n".join(sorted(written)))
    atexit.register(dump)


if __name__ == "__main__":
  probes = json.loads(sys.argv[1])
  argv = ["softattn.main"] + sys.argv[2:]
  workdir = next(a.split("=", 1)[1] for a in argv if a.startswith("--workdir="))
  install(probes, workdir)
  from softattn import main  # pylint: disable=g-import-not-at-top
  sys.argv = argv
  main.run()
