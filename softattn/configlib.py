"""Helpers for BigVision-style config files (``configs/*.py``).

A config file defines ``get_config(arg)``; ``arg`` is the text after ``:`` in
``--config=configs/x.py:variant=S/16,normalizer=relu_seqlen,runlocal``.
``parse_arg`` turns it into a ``ConfigDict`` of typed fields. A config starts
from ``default_config()`` (the schema, ``softattn.config_schema``, re-exported
here with ``resolve_config`` and ``ConfigError``), so config files never
import the trainer.
"""

from __future__ import annotations

import ml_collections

from softattn.config_schema import (ConfigError, check_keys, default_config,
                                    known_keys, resolve_config)

__all__ = ["ConfigError", "check_keys", "default_config", "known_keys",
           "resolve_config", "parse_arg", "shrink_for_runlocal"]


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
      raise ValueError(f"Unknown config argument {key!r}; valid: {sorted(defaults)}.")
    default = defaults[key]
    if not eq:
      out[key] = True
      continue
    value = value.strip()
    if isinstance(default, bool):
      if value.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"Config argument {key}={value!r} must be true/false.")
      out[key] = value.lower() in ("true", "1")
    elif isinstance(default, int):
      out[key] = int(value)
    elif isinstance(default, float):
      out[key] = float(value)
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
