r"""Command line: ``python -m softattn.main --config=<file>.py:<arg> --workdir=<dir>``.

Any config field can be overridden, e.g.
``--config.total_steps=200 --config.model.normalizer='normsoftmax(gamma=inf)'``
(ml_collections ``config_flags``; an unknown field is rejected by the flag
parser). Rerunning the same command resumes from the latest checkpoint in
``--workdir``. Exit codes: 0 done (or saved after SIGTERM), 2 config error
(one line naming the fix), 3 non-finite loss/gradients (the message names the
step; the last good checkpoint is kept).
"""

from __future__ import annotations

import sys

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, BigVision style: configs/<name>.py:<arg>.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (resumes from it).")
# Multi-process runs (config.multihost=True) off TPU pods/SLURM/MPI/k8s, e.g.
# several processes on one machine; see softattn/multihost.py.
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "host:port of process 0 (multihost only).")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "Number of processes (multihost only).")
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None, "This process's index (multihost only).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  # The loop prints its own progress lines; library INFO logs (Orbax writes a
  # dozen lines per checkpoint) only with an explicit --verbosity=0.
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  # tf.data must not grab accelerators that JAX owns.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.set_visible_devices([], "GPU")
  import jax  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  if config.get("multihost", False):
    # One process per host; coordinates come from the flags or the cluster
    # environment (TPU pods, SLURM, ...). Before anything touches a device.
    from softattn import multihost  # pylint: disable=g-import-not-at-top
    try:
      multihost.initialize(_COORDINATOR.value, _NUM_PROCESSES.value,
                           _PROCESS_ID.value)
    except multihost.MultihostError as e:
      print(f"config error: {e}", file=sys.stderr)
      sys.exit(2)
  elif (_COORDINATOR.value or _NUM_PROCESSES.value
        or _PROCESS_ID.value is not None):
    print("config error: --coordinator_address/--num_processes/--process_id "
          "need --config.multihost=True", file=sys.stderr)
    sys.exit(2)
  logging.info("JAX process %d/%d, %d local devices", jax.process_index(),
               jax.process_count(), jax.local_device_count())
  from softattn import train  # pylint: disable=g-import-not-at-top
  try:
    train.train_and_evaluate(config, _WORKDIR.value)
  except train.ConfigError as e:
    print(f"config error: {e}", file=sys.stderr)
    sys.exit(2)
  except train.NonFiniteError as e:
    print(f"training stopped: {e}", file=sys.stderr)
    sys.exit(3)


def run():
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)


if __name__ == "__main__":
  run()
