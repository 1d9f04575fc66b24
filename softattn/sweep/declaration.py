"""A sweep config file: its base config, its runs, and each run's command.

A sweep config is a BigVision-style Python file::

    def get_config(arg=None):        # the base training config
      return vit_fashion_mnist.get_config("variant=Ti/4")

    def get_sweep(arg=None):         # one override dict per run
      return grid.product(grid.sweep("model.normalizer", [...]),
                          grid.sweep("seed", [0, 1]))

This is BigVision's habit of a ``get_hyper`` next to ``get_config``: the sweep
lives beside the base config rather than in it, because the training loop
rejects config keys it does not know. Because the base config is the file's own
``get_config``, every run is launched as ``python -m softattn.main
--config=<file>:<arg> --workdir=<sweep_dir>/<run> --config.<field>=<value> ...``,
so a run can be reproduced by hand from its printed command, locally or on a TPU
VM, and the overrides are checked here by the same ``softattn.config_overrides``
code that ``softattn.main`` applies them with.

Every override is checked against the base config *before anything runs*: a path
that names no field, a subtree instead of a leaf, a field whose base value is
``None`` (no type to parse into), or a value of the wrong type is a
``SweepError`` naming the run, the field and the fix.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from typing import Any, Sequence

import ml_collections
from ml_collections import config_dict
from ml_collections.config_flags import config_path as cfg_path

from softattn import config_files, config_overrides, config_schema
from softattn.sweep import grid

# Types ``config_flags`` knows how to parse from a ``--config.<field>=`` flag.
_FLAG_TYPES = (bool, int, float, str, tuple)


class SweepError(ValueError):
  """A sweep declaration that cannot run (raised before any run starts)."""


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One declared point of a sweep: its name, overrides and fully resolved
  config (None for a run known only by name and overrides, e.g. from a
  ``sweep.json``; its folder's ``config.json`` then says the rest). What
  became of it is a ``records.RunRecord``."""
  name: str
  overrides: dict[str, Any]
  config: ml_collections.ConfigDict | None


@dataclasses.dataclass(frozen=True)
class Sweep:
  """A loaded sweep config: where it came from, its base config and runs."""
  path: str  # the config file as given on the command line
  arg: str | None
  base: ml_collections.ConfigDict
  runs: list[RunSpec]

  @property
  def config_flag(self) -> str:
    """The ``--config=`` value that loads the base config."""
    return self.path if self.arg is None else f"{self.path}:{self.arg}"

  def select(self, patterns: Sequence[str]) -> list[RunSpec]:
    """The runs whose names match any of the glob ``patterns`` (all if none).

    Raises:
      SweepError: a pattern matches no run.
    """
    if not patterns:
      return list(self.runs)
    for p in patterns:
      if not any(fnmatch.fnmatchcase(r.name, p) for r in self.runs):
        raise SweepError(f"--only {p!r} matches no run; runs: "
                         f"{', '.join(r.name for r in self.runs)}.")
    return [r for r in self.runs
            if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)]

  def run(self, name: str) -> RunSpec:
    for r in self.runs:
      if r.name == name:
        return r
    raise SweepError(f"no run named {name!r} in {self.config_flag}; runs: "
                     f"{', '.join(r.name for r in self.runs)}.")


def split_spec(spec: str) -> tuple[str, str | None]:
  """``"configs/sweeps/x.py:demo"`` -> ``("configs/sweeps/x.py", "demo")``."""
  return config_files.split_spec(spec)


def _call(fn, arg):
  try:
    return config_files.call_with_arg(fn, arg)
  except ValueError as e:
    raise SweepError(str(e)) from None


def _load_module(path: str):
  try:
    return config_files.config_module(path)
  except ValueError as e:
    raise SweepError(f"sweep {e}") from None


def config_from_file(path: str, arg: str | None = None, *,
                     relative_to: str | None = None
                     ) -> ml_collections.ConfigDict:
  """``get_config(arg)`` of another config file: a sweep's base config.

  ``relative_to`` (a sweep config's ``__file__``) makes ``path`` relative to
  that file's directory, so sweep configs work from any working directory and
  need ``configs/`` to be no package.
  """
  if relative_to is not None:
    path = os.path.join(os.path.dirname(os.path.abspath(relative_to)), path)
  return _call(_load_module(path).get_config, arg)


# The scales every study's sweep config takes (``scale=``).
SCALES = ("reduced", "full")


def check_choices(args, **choices) -> None:
  """Raises ``ValueError`` naming the valid values when a sweep config's
  arg ``args.<k>`` is not one of ``choices[k]``."""
  for k, valid in choices.items():
    if args[k] not in valid:
      *rest, last = [f"{k}={v}" for v in valid]
      raise ValueError(f"{k}={args[k]!r}; use " +
                       (", ".join(rest) + " or " if rest else "") + last)


def image_config(dataset: str, pp_train: str, pp_eval: str, *,
                 shuffle_buffer: int, **fields) -> ml_collections.ConfigDict:
  """``default_config()`` on the TFDS image dataset ``dataset`` (splits
  train / test, cached, ``data_dir`` left to TFDS), with the top-level
  ``fields`` set: the base of a sweep config built by hand."""
  c = config_schema.default_config()
  c.data.name = dataset
  c.data.data_dir = config_dict.placeholder(str)
  c.data.train_split, c.data.eval_split = "train", "test"
  c.data.pp_train, c.data.pp_eval = pp_train, pp_eval
  c.data.shuffle_buffer = shuffle_buffer
  c.data.cache = True
  for k, v in fields.items():
    c[k] = v
  return c


def select_all(sweeps: Sequence[Sweep], patterns: Sequence[str]
               ) -> list[list[RunSpec]]:
  """``Sweep.select`` over several sweeps run as one (a study's parts): each
  sweep's runs that match any pattern; a pattern must match a run in at
  least one of them.

  Raises:
    SweepError: a pattern matches no run of any sweep.
  """
  if len(sweeps) == 1:
    return [sweeps[0].select(patterns)]
  hit = lambda r, p: fnmatch.fnmatchcase(r.name, p)
  lost = [p for p in patterns
          if not any(hit(r, p) for sw in sweeps for r in sw.runs)]
  if lost:
    raise SweepError(f"--only {', '.join(map(repr, lost))} matches no run in "
                     "any of the sweeps.")
  return [[r for r in sw.runs if not patterns or any(hit(r, p)
                                                     for p in patterns)]
          for sw in sweeps]


def load(spec: str, *, extra: Sequence[str] = ()) -> Sweep:
  """Loads and checks a sweep config ``"path.py[:arg]"``.

  Args:
    spec: the config file and its optional argument.
    extra: ``"field=value"`` strings applied to every run after its own
      overrides (e.g. ``total_steps=10`` to smoke-test a sweep); values are
      parsed into the base field's type.

  Returns:
    The ``Sweep`` with one resolved config per run.

  Raises:
    SweepError: anything wrong with the declaration (see the module doc).
  """
  path, arg = split_spec(spec)
  module = _load_module(path)
  base = _call(module.get_config, arg)
  if not isinstance(base, ml_collections.ConfigDict):
    raise SweepError(f"{path}: get_config() returned {type(base).__name__}, "
                     "expected an ml_collections.ConfigDict.")
  if hasattr(module, "get_sweep"):
    try:
      overrides = _call(module.get_sweep, arg)
    except ValueError as e:  # grid helpers: clashing or empty factors
      raise SweepError(f"{path}: get_sweep(): {e}") from None
  else:
    raise SweepError(f"{path} declares no sweep: define get_sweep(arg) "
                     "returning a list of override dicts (see "
                     "softattn.sweep.grid).")
  overrides = [dict(o) for o in overrides]
  if not overrides:
    raise SweepError(f"{path}: the sweep is empty.")
  extra_overrides = parse_assignments(extra, base)
  swept = sorted({f for o in overrides for f in o} & set(extra_overrides))
  if swept:
    # The run names would then describe values the runs do not use.
    raise SweepError(f"--set {', '.join(swept)}: the sweep already varies "
                     "this field; change the sweep config instead.")
  try:
    names = grid.run_names(overrides)
  except ValueError as e:
    raise SweepError(f"{path}: {e}") from None
  runs = []
  for name, o in zip(names, overrides):
    o = {**o, **extra_overrides}
    runs.append(RunSpec(name=name, overrides=o,
                        config=resolve(base, o, name)))
  return Sweep(path=path, arg=arg, base=base, runs=runs)


def check_field(config: ml_collections.ConfigDict, path: str) -> type:
  """Returns the type of leaf ``path`` in ``config``, or raises ``SweepError``."""
  try:
    return config_overrides.field_type(config, path)
  except ValueError as e:
    raise SweepError(f"override: {e}") from None


def resolve(base: ml_collections.ConfigDict, overrides: dict[str, Any],
            run_name: str = "?") -> ml_collections.ConfigDict:
  """A copy of ``base`` with ``overrides`` applied, each checked."""
  config = base.copy_and_resolve_references()
  for path, value in overrides.items():
    check_field(config, path)
    if not isinstance(value, _FLAG_TYPES):
      raise SweepError(f"run {run_name}: override {path}={value!r} has type "
                       f"{type(value).__name__}; sweeps take "
                       f"{[t.__name__ for t in _FLAG_TYPES]}.")
    try:
      cfg_path.set_value(path, config, value)
    except (TypeError, ValueError) as e:
      raise SweepError(f"run {run_name}: cannot set {path}={value!r}: {e}") \
          from None
  return config


def parse_assignments(assignments: Sequence[str],
                      base: ml_collections.ConfigDict) -> dict[str, Any]:
  """``["total_steps=10", "model.normalizer=relu"]`` -> typed override dict."""
  out = {}
  for text in assignments:
    path, sep, raw = text.partition("=")
    if not sep:
      raise SweepError(f"--set {text!r}: expected field=value.")
    try:
      out[path] = config_overrides.parse_value(base, path, raw)
    except ValueError as e:
      raise SweepError(f"--set: {e}") from None
  return out


def flag_value(value: Any) -> str:
  """The text ``config_overrides.parse_value`` (as ``config_flags``) reads
  back as ``value``."""
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, float):
    return repr(value)  # 'inf' and '1e-05' both parse back as floats
  if isinstance(value, tuple):
    return repr(value)
  return str(value)


def override_flags(overrides: dict[str, Any]) -> list[str]:
  """``{"seed": 1}`` -> ``["--config.seed=1"]``."""
  return [f"--config.{k}={flag_value(v)}" for k, v in overrides.items()]


def main_args(sweep: Sweep, run: RunSpec, workdir: str) -> list[str]:
  """Arguments of ``python -m softattn.main`` for ``run`` under ``workdir``."""
  run_dir = workdir.rstrip("/") + "/" + run.name
  return [f"--config={sweep.config_flag}", f"--workdir={run_dir}",
          *override_flags(run.overrides)]
