"""The one way in for configs: config files, overrides, resolution.

A config file (``configs/*.py``, BigVision style) defines ``get_config(arg)``;
``arg`` is the text after ``:`` in
``--config=configs/x.py:variant=S/16,normalizer=relu_seqlen,runlocal``.
``parse_arg`` turns it into a ``ConfigDict`` of typed fields. A config starts
from ``default_config()`` (the schema, ``softattn.config_schema``, re-exported
here with ``ConfigError``), so config files never import the trainer.

``load_file("configs/x.py:arg")`` runs a config file and ``apply_override``
sets one ``--config.<field>=<text>`` on the result, parsing the text into the
field's type the way ``ml_collections.config_flags`` does. Both raise
``ValueError`` with one line naming the fix; ``softattn.main``,
``softattn.aot`` and the sweep declarations share them, so a sweep's override
is checked by the same code that will apply it.

``resolve_config(config)`` checks a config against everything it names
(keys, registered names, mesh, dataset) and fills its derived fields, before
anything compiles. Importing this module stays light (config files import
it); ``resolve_config`` imports the modules that register their checks with
the schema.

Why not ``config_flags.DEFINE_config_file`` (as ``big_vision`` does)? With
ml_collections 1.1 it cannot keep what the command line promises
(tests/test_cli.py), each a one-line error naming the fix:
  * an unknown field (``--config.model.dropout=0.1``) escapes flag parsing
    as a bare ``AttributeError: 'dropout'`` (``KeyError`` for
    ``--config.seed.x``): not an ``absl`` flag error, so a traceback, and it
    names neither the field's path nor the valid fields;
  * a ``ValueError`` from ``get_config`` (an unknown or mistyped config arg)
    is re-raised with the whole traceback inside its message;
  * a missing config file is no error while parsing: the flag holds a
    placeholder that raises a multi-line ``IOError`` on first access;
  * ``--config.model=vit`` (a section) is parsed as a ``ConfigDict`` literal
    ("malformed node"), not "set its fields";
  * overrides are found in ``sys.argv`` (or a ``sys_argv`` fixed when the flag
    is defined) and each defines a new flag in the ``FlagValues``, so a second
    command line in one process (the in-process CLI tests) needs a fresh
    ``FlagValues`` with every flag defined again, and a sweep's
    ``--set field=value`` (no command line of its own) cannot use it at all.
What it does do is reused here: its value parsers (``_PARSERS``) and
``config_path`` (field types, setting values), so ``--config.x=...`` means
what it means to ``config_flags``, with ``--config.x value`` and
``--noconfig.x`` too.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import math
import os
import re
from typing import Any, NamedTuple, Sequence

from absl import flags
import ml_collections
from ml_collections.config_flags import config_path, tuple_parser

from softattn import config_schema
from softattn.config_schema import (ConfigError, check_keys, default_config,
                                    known_keys, one_line)

__all__ = ["ConfigError", "check_keys", "default_config", "known_keys",
           "Resolved", "resolve_config", "build_model", "parse_arg",
           "shrink_for_runlocal", "split_spec", "load_module", "config_module",
           "load_file", "one_line", "field_type", "parse_value",
           "apply_override", "split_overrides", "load_with_overrides"]


def _split_top_level(text: str) -> list[str]:
  # Commas inside parentheses belong to a value: normalizer=relu_seqlen(alpha=1, act=gelu)
  parts, depth, cur = [], 0, []
  for ch in text:
    if ch in "([":
      depth += 1
    elif ch in ")]":
      depth -= 1
    if ch == "," and depth == 0:
      parts.append("".join(cur))
      cur = []
    else:
      cur.append(ch)
  if cur:
    parts.append("".join(cur))
  return [p.strip() for p in parts if p.strip()]


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
  """``"variant=S/16,runlocal"`` -> ``ConfigDict(variant="S/16", runlocal=True)``.

  Every key must be one of ``defaults`` (unknown keys raise ``ValueError``
  listing the valid ones); values are converted to the default's type (a bare
  key means ``True``).
  """
  out = ml_collections.ConfigDict(defaults)
  for item in _split_top_level(arg or ""):
    key, eq, value = item.partition("=")
    key = key.strip()
    if key not in defaults:
      raise ValueError(f"unknown arg {key!r}{_did_you_mean(key, defaults)}; "
                       f"valid: {', '.join(defaults)}.")
    default = defaults[key]
    if not eq:
      out[key] = True
      continue
    value = value.strip()
    if isinstance(default, bool):
      if value.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"arg {key}={value!r} must be true or false.")
      out[key] = value.lower() in ("true", "1")
    elif isinstance(default, (int, float)):
      kind = type(default)
      try:
        out[key] = kind(value)
      except ValueError:
        raise ValueError(f"arg {key}={value!r} must be a {kind.__name__}, e.g. "
                         f"{key}={default}.") from None
    else:
      out[key] = value
  return out


def _did_you_mean(key: str, valid) -> str:
  close = difflib.get_close_matches(key, list(valid), n=1)
  return f" (did you mean {close[0]!r}?)" if close else ""


def shrink_for_runlocal(c: ml_collections.ConfigDict, *, steps: int = 2,
                        batch: int = 8) -> ml_collections.ConfigDict:
  """The ``runlocal`` form: a few steps of a small batch, logging every step.

  Keeps the model and data choices (configs shrink the model themselves) so
  the smoke run exercises the same code as the full one.
  """
  c.num_epochs = None
  c.total_steps = steps
  c.batch_size = batch
  c.log_every = 1
  c.eval_every = steps
  c.checkpoint_every = steps
  c.eval.batch_size = batch
  c.data.shuffle_buffer = 16
  c.data.cache = False
  with c.schedule.unlocked():
    c.schedule.warmup_steps = 1
    c.schedule.warmup_epochs = None
  return c


# ----------------------------------------------------------------------------
# Config files and ``--config.<field>=<value>`` overrides.


def split_spec(spec: str) -> tuple[str, str | None]:
  """``"configs/x.py:variant=S/16"`` -> ``("configs/x.py", "variant=S/16")``."""
  path, sep, arg = spec.partition(":")
  return path, (arg if sep else None)


def load_module(path: str):
  """Runs the Python file at ``path`` (not a package module) as a module.

  Config files, sweep declarations and a study's ``sweep.py``/``report.py``
  are loaded this way. The module's name is unique to the file's absolute
  path, so two studies' ``sweep.py`` never collide; it is not added to
  ``sys.modules``, so each call runs the file afresh.

  Raises:
    ValueError: no such ``.py`` file (listing the ones next to it), or one
      that does not parse (its line).
  """
  if not path.endswith(".py") or not os.path.isfile(path):
    where = os.path.dirname(path) or "."
    found = sorted(f for f in os.listdir(where) if f.endswith(".py")
                   ) if os.path.isdir(where) else []
    hint = (f"config files in {where}/: {', '.join(found)}" if found else
            f"paths are relative to {os.getcwd()}")
    raise ValueError(f"config file {path!r} not found; {hint}.")
  name = "softattn_file_" + re.sub(r"\W", "_", os.path.abspath(path))
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:  # a traceback would bury the line that matters
    where = f"config file {path!r}"
    if e.filename and os.path.abspath(e.filename) != os.path.abspath(path):
      where = f"{e.filename!r} (imported by config file {path!r})"
    raise ValueError(f"{where} has a syntax error at line {e.lineno} "
                     f"({e.msg}); fix it there.") from None
  return module


def config_module(path: str):
  """``load_module(path)`` of a config file: one that defines ``get_config``."""
  module = load_module(path)
  if not callable(getattr(module, "get_config", None)):
    raise ValueError(f"config file {path!r} defines no get_config(arg).")
  return module


def call_with_arg(fn, arg: str | None):
  """``fn(arg)``, or ``fn()`` when no ``:arg`` was given (as config flags)."""
  if arg is None:
    return fn()
  if not inspect.signature(fn).parameters:
    raise ValueError(f"{fn.__module__}.{fn.__name__}() takes no argument but "
                     f"{arg!r} was given; drop ':{arg}'.")
  return fn(arg)


def load_file(spec: str, *, lock: bool = True) -> ml_collections.ConfigDict:
  """``get_config(arg)`` of the config file ``"path.py[:arg]"``.

  Raises:
    ValueError: a missing file, or any ``ValueError``/``TypeError`` the file's
      ``get_config`` raises (an unknown arg, a bad variant), as one line that
      names the file.
  """
  path, arg = split_spec(spec)
  module = config_module(path)
  try:
    config = call_with_arg(module.get_config, arg)
  except (ValueError, TypeError, KeyError) as e:
    raise ValueError(f"{spec}: {one_line(e)}") from None
  if not isinstance(config, ml_collections.ConfigDict):
    raise ValueError(f"{path}: get_config() returned {type(config).__name__}, "
                     "expected an ml_collections.ConfigDict.")
  if lock:
    config.lock()
  return config


def field_type(config: ml_collections.ConfigDict, path: str) -> type:
  """The type of leaf ``path`` (``"model.normalizer"``) in ``config``.

  Raises:
    ValueError: ``path`` names no field (with the valid names and the nearest
      one), names a section rather than a field, or a field whose value is
      ``None`` with no type (``config_flags`` cannot parse those either).
  """
  holder = config
  keys = path.split(".")
  for i, key in enumerate(keys):
    where = "config." + ".".join(keys[:i]) if i else "config"
    if not isinstance(holder, ml_collections.ConfigDict):
      raise ValueError(f"unknown config field {path!r}: {where} is a "
                       f"{type(holder).__name__}, not a section.")
    if key not in holder:
      raise ValueError(
          f"unknown config field {path!r}{_did_you_mean(key, holder.keys())}; "
          f"{where} has: {', '.join(sorted(holder.keys()))}.")
    holder = holder[key]
  if isinstance(holder, ml_collections.ConfigDict):
    raise ValueError(f"config.{path} is a section, not a field; set its fields "
                     f"(--config.{path}.<field>=...) instead.")
  kind = config_path.get_type(path, config)
  if kind is type(None):
    raise ValueError(
        f"config.{path} is None in the config file and has no type to parse "
        f"into; give it a typed default or "
        f"ml_collections.config_dict.placeholder(<type>) there.")
  return kind


# The parsers ``ml_collections.config_flags`` uses for each field type, so a
# value typed here means what it means to ``--config.<field>`` in big_vision.
_PARSERS = {bool: flags.BooleanParser(), int: flags.IntegerParser(),
            float: flags.FloatParser(), str: flags.ArgumentParser(),
            tuple: tuple_parser.TupleParser()}
_EXAMPLES = {bool: "true", int: "100", float: "0.5", tuple: "'(4, 4)'"}


def parse_value(config: ml_collections.ConfigDict, path: str, text: str) -> Any:
  """``text`` parsed into the type of field ``path`` (see ``field_type``)."""
  kind = field_type(config, path)
  parser = _PARSERS.get(kind)
  if parser is None:
    raise ValueError(f"config.{path} has type {kind.__name__}, which command "
                     f"line overrides cannot set; change it in the config file.")
  try:
    value = parser.parse(text)
  except (ValueError, TypeError, SyntaxError):
    raise ValueError(
        f"config.{path}={text!r} is not a {kind.__name__}; e.g. "
        f"--config.{path}={_EXAMPLES.get(kind, '...')}.") from None
  if kind is float and isinstance(value, int):
    value = float(value)
  return value


def apply_override(config: ml_collections.ConfigDict, path: str, value: Any
                   ) -> None:
  """Sets field ``path``; ``value`` is text (parsed) or an already typed value."""
  if isinstance(value, str) and field_type(config, path) is not str:
    value = parse_value(config, path, value)
  else:
    field_type(config, path)
  try:
    config_path.set_value(path, config, value)
  except (TypeError, ValueError) as e:
    raise ValueError(f"cannot set config.{path}={value!r}: {one_line(e)}"
                     ) from None


def split_overrides(argv: Sequence[str]
                    ) -> tuple[list[str], list[tuple[str, str]]]:
  """Separates ``--config.<field>[=<value>]`` overrides from the other flags.

  Returns ``(other_argv, [(field, text), ...])``. A bare ``--config.<f>`` means
  ``true`` and ``--noconfig.<f>`` ``false``, as absl's boolean flags;
  ``--config.<f> <value>`` takes the next token unless it is another flag.
  """
  rest, overrides = [], []
  args = list(argv)
  i = 0
  while i < len(args):
    arg = args[i]
    name, eq, text = arg.partition("=")
    if name.startswith(("--config.", "--noconfig.")):
      field = name.split(".", 1)[1]
      if name.startswith("--noconfig."):
        text = "false"
      elif not eq:
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
          i += 1
          text = args[i]
        else:
          text = "true"
      overrides.append((field, text))
    else:
      rest.append(arg)
    i += 1
  return rest, overrides


def load_with_overrides(spec: str, overrides: Sequence[tuple[str, str]]
                        ) -> ml_collections.ConfigDict:
  """``load_file(spec)`` with each ``(field, text)`` override applied, in order.

  Raises:
    ValueError: one line naming the fix (see ``load_file``, ``apply_override``).
  """
  config = load_file(spec)
  for field, text in overrides:
    apply_override(config, field, text)
  return config


# ----------------------------------------------------------------------------
# Resolution: the config against the code, the devices and the data.


class Resolved(NamedTuple):
  """A config ``resolve_config`` checked and completed, with its dataset's facts.

  ``dataset_info`` is ``dict(num_classes, image_shape, num_train, num_eval)``.
  Unpacks as ``cfg, info = resolve_config(config)``.
  """
  config: ml_collections.ConfigDict
  dataset_info: dict


def _import_owners() -> None:
  """Imports the modules that register checks with ``config_schema``."""
  # pylint: disable=g-import-not-at-top,unused-import
  from softattn import losses, normalizers, optim, sharding, steps  # noqa: F401


def _check_mesh(cfg, num_devices: int | None) -> None:
  """The mesh fits the devices and its ``data`` axis divides the batches."""
  import jax  # pylint: disable=g-import-not-at-top
  from softattn import sharding  # pylint: disable=g-import-not-at-top
  n = jax.device_count() if num_devices is None else num_devices
  try:
    n_data, _ = sharding.mesh_shape(cfg.mesh, n)
  except ValueError as e:
    raise ConfigError(one_line(e)) from None
  if cfg.batch_size % n_data:
    raise ConfigError(
        f"batch_size={cfg.batch_size} is not divisible by the mesh's data axis "
        f"({n_data} devices); set --config.batch_size to a multiple of {n_data} "
        f"or change config.mesh.")
  eval_bs = cfg.eval.batch_size or cfg.batch_size
  if eval_bs % n_data:
    raise ConfigError(f"config.eval.batch_size={eval_bs} is not divisible by "
                      f"the data axis ({n_data}); use a multiple of {n_data}.")


def _pp_strings(node, path: str):
  """``(path, spec)`` of every ``pp_*`` field under ``node``, at any depth:
  ``data.pp_train``, ``eval.i1k_data.pp_eval``,
  ``fewshot.datasets.<name>.pp_eval``, and any a config adds."""
  if isinstance(node, (ml_collections.ConfigDict, dict)):
    for key in node.keys():
      value, where = node[key], f"{path}.{key}"
      if str(key).startswith("pp_") and not isinstance(
          value, (ml_collections.ConfigDict, dict)):
        yield where, value
      else:
        yield from _pp_strings(value, where)


def _check_pp(cfg) -> None:
  """Every preprocessing string parses and names ops that exist.

  The input pipeline parses ``pp_train`` when training starts and few-shot
  pp strings at the first few-shot eval: after the workdir exists, or hours
  in. Parsing builds the ops but runs nothing.
  """
  from softattn.data import preprocess  # pylint: disable=g-import-not-at-top
  for where, spec in _pp_strings(cfg, "config"):
    try:
      preprocess.check(spec)
    except ValueError as e:
      raise ConfigError(f"{where}={spec!r}: {one_line(e)}") from None


def _dataset_info(cfg) -> dict[str, Any]:
  """The dataset must exist: a missing one is a config error, not a crash later."""
  from softattn import data as data_lib  # pylint: disable=g-import-not-at-top
  if not cfg.data.get("name", None):
    raise ConfigError("config.data.name is not set; use a TFDS name such as "
                      "fashion_mnist, cifar10, cifar100, imagenet2012, imagenet21k.")
  try:
    return dict(data_lib.dataset_info(cfg.data))
  except Exception as e:  # pylint: disable=broad-except
    raise ConfigError(f"config.data (dataset {cfg.data.name!r}): "
                      f"{one_line(e)}") from None


def resolve_config(config, *, num_devices: int | None = None,
                   dataset_info: dict | None = None) -> Resolved:
  """Checks ``config`` and fills derived fields; returns ``Resolved(config, dataset_info)``.

  Raises ``ConfigError`` (one line, naming the fix) for unknown keys, unknown
  loss/optimizer/schedule/normalizer/sharding names (the checks their modules
  register with ``config_schema``), a count out of range (a batch size below
  1, a negative cadence: ``config_schema.BOUNDS``), a preprocessing string
  that does not parse (every ``pp_*`` field, few-shot datasets' too), a batch
  size the ``data`` axis does not divide, and a dataset that cannot be found.
  Derived: ``total_steps`` from ``num_epochs``, ``model.num_classes`` from the
  dataset. The model's own fields are ``build_model``'s to check.

  Idempotent: a ``Resolved`` comes back as it is (no second dataset lookup),
  or, given ``num_devices``/``dataset_info``, is checked again against those
  with its own dataset facts.

  Args:
    config: a ``ConfigDict`` (or dict) over ``default_config()``, or a
      ``Resolved``.
    num_devices: devices of the mesh (default ``jax.device_count()``); e.g.
      the chips of a TPU topology compiled for ahead of time.
    dataset_info: ``dict(num_classes, image_shape, num_train, num_eval)``;
      when given, no dataset is looked up (compiling an ImageNet-21k config
      on a machine without the data).
  """
  if isinstance(config, Resolved):
    if num_devices is None and dataset_info is None:
      return config
    config, dataset_info = config.config, (
        config.dataset_info if dataset_info is None else dataset_info)
  _import_owners()
  cfg = config_schema.merged(check_keys(config))
  config_schema.check_fields(cfg)
  config_schema.check_bounds(cfg)
  _check_pp(cfg)
  _check_mesh(cfg, num_devices)
  info = dict(dataset_info) if dataset_info is not None else _dataset_info(cfg)
  # Length of the run.
  if cfg.total_steps is None:
    if not cfg.num_epochs:
      raise ConfigError("Set config.total_steps or config.num_epochs.")
    cfg.total_steps = int(math.ceil(
        cfg.num_epochs * info["num_train"] / cfg.batch_size))
  cfg.total_steps = int(cfg.total_steps)
  if cfg.total_steps < 1:  # set ones are bounded; this one came from epochs
    raise ConfigError(
        f"config.num_epochs={cfg.num_epochs} gives total_steps="
        f"{cfg.total_steps} at batch_size={cfg.batch_size} and "
        f"{info['num_train']} examples; it must be >= 1: raise num_epochs or "
        f"set total_steps.")
  with cfg.model.unlocked():
    if cfg.model.get("num_classes", None) is None:
      cfg.model.num_classes = int(info["num_classes"])
  return Resolved(cfg, info)


def build_model(cfg, image_shape: Sequence[int] | None = None):
  """The Flax module ``config.model_name`` with ``config.model`` as arguments.

  Constructing it traces nothing; a wrong model field (a ViT variant, a head
  count that does not divide the width, depth 0) is a ``ConfigError`` naming
  the field. With ``image_shape`` (``(H, W, C)``, the resolved
  ``dataset_info["image_shape"]``) a model that has ``check_input`` also
  checks it takes such images (a ViT's patch must divide them).
  """
  from softattn import models  # pylint: disable=g-import-not-at-top
  try:
    model = models.build_model(cfg.model_name, **cfg.model.to_dict())
    if image_shape is not None and hasattr(model, "check_input"):
      model.check_input(tuple(image_shape))
  except (ValueError, TypeError, KeyError) as e:
    raise ConfigError(f"config.model_name={cfg.model_name!r} / config.model: "
                      f"{one_line(e)}") from None
  return model
