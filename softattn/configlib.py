"""Helpers for BigVision-style config files (``configs/*.py``).

A config file defines ``get_config(arg)``; ``arg`` is the text after ``:`` in
``--config=configs/x.py:variant=S/16,normalizer=relu_seqlen,runlocal``.
``parse_arg`` turns it into a ``ConfigDict`` of typed fields. A config starts
from ``default_config()`` (the schema, ``softattn.config_schema``, re-exported
here with ``resolve_config`` and ``ConfigError``), so config files never
import the trainer.

``load_file("configs/x.py:arg")`` runs a config file and ``apply_override``
sets one ``--config.<field>=<text>`` on the result, parsing the text into the
field's type the way ``ml_collections.config_flags`` does. Both raise
``ValueError`` with one line naming the fix; ``softattn.main`` and the sweep
declarations share them, so a sweep's override is checked by the same code
that will apply it.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import os
from typing import Any

from absl import flags
import ml_collections
from ml_collections.config_flags import config_path, tuple_parser

from softattn.config_schema import (ConfigError, check_keys, default_config,
                                    known_keys, one_line, resolve_config)

__all__ = ["ConfigError", "check_keys", "default_config", "known_keys",
           "resolve_config", "parse_arg", "shrink_for_runlocal", "split_spec",
           "load_module", "load_file", "one_line", "field_type", "parse_value",
           "apply_override"]


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
  """Imports the config file at ``path`` (a file, not a package module)."""
  if not path.endswith(".py") or not os.path.isfile(path):
    where = os.path.dirname(path) or "."
    found = sorted(f for f in os.listdir(where) if f.endswith(".py")
                   ) if os.path.isdir(where) else []
    hint = (f"config files in {where}/: {', '.join(found)}" if found else
            f"paths are relative to {os.getcwd()}")
    raise ValueError(f"config file {path!r} not found; {hint}.")
  name = "softattn_config_" + os.path.splitext(
      os.path.basename(path))[0].replace("-", "_")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
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
  module = load_module(path)
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
