r"""``python -m softattn.aot``: compile a config for a TPU topology, or the launch table.

  python -m softattn.aot --config=configs/i21k_vit.py:variant=B/16 \
      --topology=v5e-256 [--batch=4096] [--programs=train,eval] \
      [--config.sharding_rules='[(".*", "fsdp")]']
  python -m softattn.aot table [--out=docs/scale.md] [--only=B/16]
  python -m softattn.aot hostfeed [--out=docs/scale.md]

``hostfeed`` adds the host-feed column to an existing table from its
images/s and benchmarks/results/input_pipeline.json, compiling nothing.
Runs on a CPU host (no TPU needed; libtpu from ``.[tpu-aot]``). Exit status
0 when every program fits, 1 when one does not (a result, printed), 2 for a
config or topology error (one line naming the fix). ``--config`` and its
``--config.<field>=<value>`` overrides are read as ``softattn.main`` reads
them (``softattn.config_overrides``, which says why not ``config_flags``).
"""

from __future__ import annotations

import sys

from absl import app, flags, logging

from softattn import config_overrides, configlib

_CONFIG = flags.DEFINE_string(
    "config", None, "Config file, BigVision style: configs/<name>.py:<arg>; "
    "override fields with --config.<field>=<value>.")
_TOPOLOGY = flags.DEFINE_string(
    "topology", None, "TPU slice, e.g. v4-32, v5e-256, v5p-128, 2xv5e-256.")
_BATCH = flags.DEFINE_integer("batch", None, "Global batch (default: the config's).")
_PROGRAMS = flags.DEFINE_list("programs", ["train", "eval", "diagnostics"],
                              "Programs to compile.")
_OUT = flags.DEFINE_string("out", "docs/scale.md", "table: the Markdown file.")
_ONLY = flags.DEFINE_string("only", None,
                            "table: only rows whose label contains this.")


_OVERRIDES: list[tuple[str, str]] = []


def _parse_flags(argv):
  # The --config.<field> overrides are not absl flags: split them off first.
  rest, overrides = config_overrides.split_overrides(argv)
  _OVERRIDES[:] = overrides
  try:
    return flags.FLAGS(rest)
  except flags.Error as e:
    print(f"error: {configlib.one_line(e)}; see --helpfull.", file=sys.stderr)
    sys.exit(2)


def main(argv):
  import jax  # pylint: disable=g-import-not-at-top
  # Compile for abstract TPU devices; the host's own backend is the CPU.
  jax.config.update("jax_platforms", "cpu")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  if argv[1:] == ["hostfeed"]:
    from softattn.aot import table  # pylint: disable=g-import-not-at-top
    table.add_host_feed(_OUT.value)
    print(f"added the host-feed column to {_OUT.value}")
    return
  if argv[1:] == ["table"]:
    from softattn.aot import table  # pylint: disable=g-import-not-at-top
    table.main(_OUT.value, only=_ONLY.value)
    return
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments {argv[1:]}; the "
                         "subcommands are `table` and `hostfeed`.")
  if _CONFIG.value is None or not _TOPOLOGY.value:
    raise app.UsageError("Give --config=<file>.py:<args> and --topology=<name>.")
  try:
    config = config_overrides.load_with_overrides(_CONFIG.value, _OVERRIDES)
    from softattn import aot  # pylint: disable=g-import-not-at-top
    compiled = aot.compile_config(config, _TOPOLOGY.value,
                                  batch=_BATCH.value, programs=_PROGRAMS.value)
  except ValueError as e:  # configlib.ConfigError is one
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  print(aot.describe(compiled))
  sys.exit(0 if aot.estimate(compiled).fits else 1)


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_flags)
