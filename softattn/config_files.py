"""Config files: running them, and the argument after their ``:``.

A config file (``configs/*.py``, BigVision style) defines ``get_config(arg)``;
``arg`` is the text after ``:`` in
``--config=configs/x.py:variant=S/16,normalizer=relu_seqlen,runlocal``.
``parse_arg`` turns it into a ``ConfigDict`` of typed fields. A config starts
from ``softattn.config_schema.default_config()`` (the schema), so config files
never import the trainer; ``shrink_for_runlocal`` is their ``runlocal`` form.

``load_file("configs/x.py:arg")`` runs a config file and returns its config
(``load_module`` runs any such file: sweep declarations and a study's
``sweep.py``/``report.py`` too). Errors are ``ValueError`` with one line
naming the fix. ``softattn.config_overrides`` applies
``--config.<field>=<value>`` to the loaded config, and
``softattn.configlib.resolve_config`` checks it against the code and the
data.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re

import ml_collections

from softattn.config_schema import did_you_mean, one_line


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
      raise ValueError(f"unknown arg {key!r}{did_you_mean(key, defaults)}; "
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
# Running config files.


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
