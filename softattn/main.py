r"""Command line: ``python -m softattn.main --config=<file>.py[:<arg>] --workdir=<dir>``.

Any config field can be overridden, e.g.
``--config.total_steps=200 --config.model.normalizer='normsoftmax(gamma=inf)'``;
the text is parsed into the field's type as ``ml_collections.config_flags``
does (``softattn.config_overrides``, which says why not ``config_flags``
itself).
The config is resolved once (``configlib.resolve_config``: one dataset
lookup) and the resolved config is trained. Rerunning the same command
resumes from the latest checkpoint in ``--workdir``.

Exit codes:
  0: done (or saved after SIGTERM).
  2: a bad command line, config or workdir: one line on stderr naming the
     fix, printed before anything is compiled and before the workdir is
     created (an unknown field or config arg, a value of the wrong type, a
     normalizer parameter outside its domain, an unknown model variant, a
     missing config file or dataset, a config file with a syntax error, a
     count out of range such as a batch size < 1 or a negative cadence, a
     preprocessing string that does not parse, a model field the model
     rejects such as heads not dividing the width or depth 0; a
     gs:// bucket that does not exist, cannot be reached or refuses this
     account, missing credentials, a local workdir that cannot be written).
     At start, also: another live run holds the workdir (its host and pid
     are named); resuming with a config changed in a field a resume may not
     change (the fields are named; ``--allow_config_change`` lets it
     through); checkpoints exist but none restores (each is named with why).
  3: non-finite loss/gradients (the message names the step; the last good
     checkpoint is kept).
  4: the workdir could not be written or read mid-run once the retries gave
     up (unreachable, quota, disk full: the path, the step and the newest
     saved checkpoint are named; rerunning resumes).
  A preemption (SIGTERM) saves the current step and exits 0; see
  docs/training.md's faults table for what each fault leaves behind.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Sequence

from absl import app, flags, logging
import ml_collections

from softattn import config_overrides, configlib

flags.DEFINE_string("config", None,
                    "Config file, BigVision style: configs/<name>.py[:<arg>]; "
                    "override fields with --config.<field>=<value>.")
flags.DEFINE_string("workdir", None, "Output directory (resumes from it).")
flags.DEFINE_bool("allow_config_change", False,
                  "Resume a workdir whose config.json differs from this "
                  "config in fields a resume may not change (model, "
                  "optimizer, data, ...); see softattn/config_diff.py.")
# Multi-process runs (config.multihost=True) off TPU pods/SLURM/MPI/k8s, e.g.
# several processes on one machine; see softattn/multihost.py.
flags.DEFINE_string("coordinator_address", None,
                    "host:port of process 0 (multihost only).")
flags.DEFINE_integer("num_processes", None,
                     "Number of processes (multihost only).")
flags.DEFINE_integer("process_id", None, "This process's index (multihost only).")

CONFIG_FLAG = "--config"


class UsageError(ValueError):
  """A bad command line: one line, naming the fix (exit code 2)."""


@dataclasses.dataclass
class Command:
  """What the command line asks for: a checked config and a workdir."""
  config: ml_collections.ConfigDict
  workdir: str


def parse_command_line(argv: Sequence[str]) -> Command:
  """Parses ``argv`` (``argv[0]`` is the program) and loads the config.

  Everything here is pure Python: no JAX backend is initialised and nothing
  is compiled. Raises ``UsageError`` (one line) for anything wrong.
  """
  rest, overrides = config_overrides.split_overrides(argv)
  flags.FLAGS.unparse_flags()  # a fresh parse, also when called again (tests)
  try:
    unparsed = flags.FLAGS(rest, known_only=False)
  except flags.Error as e:
    raise UsageError(f"{configlib.one_line(e)}; see --helpfull.") from None
  if len(unparsed) > 1:
    raise UsageError(f"unexpected arguments {unparsed[1:]}; every argument is "
                     "a --flag (e.g. --config.total_steps=10).")
  spec, workdir = flags.FLAGS.config, flags.FLAGS.workdir
  if not spec:
    raise UsageError("--config is required, e.g. "
                     "--config=configs/quickstart.py:runlocal.")
  if not workdir:
    raise UsageError("--workdir is required (outputs and checkpoints go "
                     "there, e.g. --workdir=/tmp/run).")
  try:
    config = config_overrides.load_with_overrides(spec, overrides)
  except ValueError as e:
    raise UsageError(str(e)) from None
  return Command(config, workdir)


def check_config(config: ml_collections.ConfigDict) -> configlib.Resolved:
  """The training loop's own checks, then the model's construction.

  ``configlib.resolve_config`` rejects unknown keys, names and datasets;
  building the (unbound) model checks its fields, e.g. a ViT variant. Neither
  traces nor compiles anything. Returns the resolved config, which
  ``train.train_and_evaluate`` takes as it is. Raises ``UsageError`` (one
  line).
  """
  try:
    resolved = configlib.resolve_config(config)
    configlib.build_model(resolved.config, resolved.dataset_info["image_shape"])
  except configlib.ConfigError as e:
    raise UsageError(str(e)) from None
  return resolved


def fail(message: str, code: int) -> None:
  print(message, file=sys.stderr)
  sys.exit(code)


_COMMAND: list[Command] = []


def _parse_flags(argv):
  # app.run's flags parser: a bad command line ends here with one line.
  try:
    _COMMAND.append(parse_command_line(argv))
  except UsageError as e:
    fail(f"config error: {e}", 2)
  return argv[:1]


def main(argv):
  del argv  # parsed by _parse_flags
  command = _COMMAND[-1]
  # The loop prints its own progress lines; library INFO logs (Orbax writes a
  # dozen lines per checkpoint) only with an explicit --verbosity=0.
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  # tf.data must not grab accelerators that JAX owns.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.set_visible_devices([], "GPU")
  import jax  # pylint: disable=g-import-not-at-top
  coordinates = (flags.FLAGS.coordinator_address, flags.FLAGS.num_processes,
                 flags.FLAGS.process_id)
  if command.config.get("multihost", False):
    # One process per host; coordinates come from the flags or the cluster
    # environment (TPU pods, SLURM, ...). Before anything touches a device.
    from softattn import multihost  # pylint: disable=g-import-not-at-top
    try:
      multihost.initialize(*coordinates)
    except multihost.MultihostError as e:
      fail(f"config error: {e}", 2)
  elif coordinates[0] or coordinates[1] or coordinates[2] is not None:
    fail("config error: --coordinator_address/--num_processes/--process_id "
         "need --config.multihost=True", 2)
  logging.info("JAX process %d/%d, %d local devices", jax.process_index(),
               jax.process_count(), jax.local_device_count())
  from softattn import io_faults, paths, train, workdir_check  # pylint: disable=g-import-not-at-top
  try:
    resolved = check_config(command.config)  # one dataset lookup
    # After the config (a bad one creates no workdir), before any compile.
    workdir_check.check_writable(command.workdir)
    train.train_and_evaluate(
        resolved, command.workdir,
        allow_config_change=flags.FLAGS.allow_config_change)
  except paths.PathError as e:
    fail(f"workdir error: {e}", 2)
  except UsageError as e:
    fail(f"config error: {e}", 2)
  except configlib.ConfigError as e:
    fail(f"config error: {e}", 2)
  except train.NonFiniteError as e:
    fail(f"training stopped: {e}", 3)
  except io_faults.WorkdirIOError as e:
    fail(f"workdir I/O error: {e}", 4)


def run():
  app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
  run()
