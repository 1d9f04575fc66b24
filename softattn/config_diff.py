"""A resumed run's config against the one it started with.

Rerunning a command resumes from the workdir's checkpoint; rerunning it with a
different learning rate, model or dataset would silently continue one run
under another's settings and leave a workdir whose ``config.json`` describes
neither. ``check_resume`` compares the resolved config with the saved
``config.json`` and raises ``ConfigChanged`` (one line, exit 2) naming every
changed field, unless the change is one a resume may make (``RESUMABLE``:
run length, cadences, records, where the data lives and how the devices are
laid out) or the user passed ``--allow_config_change``.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

from softattn import paths
from softattn.config_schema import ConfigError

# Fields a resume may change: how long, how often, what is printed or kept,
# where the data is read from, and the device mesh (Orbax restores onto any
# sharding). Patterns over dotted paths. Everything else (model, optimizer,
# schedule shape, data, seed, batch) changes the run itself.
RESUMABLE = ("name", "description", "total_steps", "num_epochs", "log_every",
             "eval_every", "checkpoint_every", "keep_checkpoints",
             "checkpoint_async", "diagnostics", "verbose", "multihost",
             "mesh.*", "eval.batch_size", "fewshot.every", "init_from.*",
             "*.data_dir")

# Fields added to the configs after runs already existed, each with the value
# that reproduces the run as it was before the field existed. A workdir
# written before the field was added has no such key; resuming it with the
# field at this value continues the same run, so it is not a change (any
# other value is). Add a field here when a config file starts writing it.
ADDED_FIELDS = {"model.num_registers": 0, "model.logits_soft_cap": None,
                "data.image_size": None}


class ConfigChanged(ConfigError):
  """The config differs from the saved one in fields a resume may not change."""


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
  """``{"a.b": leaf}`` of nested dicts (lists and scalars are leaves)."""
  if not isinstance(d, dict) or (prefix and not d):
    return {prefix: d}
  out: dict[str, Any] = {}
  for k, v in d.items():
    out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
  return out


def changed_fields(saved: dict, new: dict) -> list[str]:
  """Dotted paths whose values differ (JSON-normalised) and may not change."""
  a = flatten(json.loads(json.dumps(saved, default=str)))
  b = flatten(json.loads(json.dumps(new, default=str)))
  return sorted(k for k in a.keys() | b.keys()
                if a.get(k) != b.get(k)
                and not (k not in a and k in ADDED_FIELDS
                         and b[k] == ADDED_FIELDS[k])
                and not any(fnmatch.fnmatchcase(k, p) for p in RESUMABLE))


def check_resume(workdir: str, new: dict, *, allow_change: bool) -> list[str]:
  """Raises ``ConfigChanged`` if ``workdir`` holds a run of another config.

  The training loop calls it when ``workdir`` has a checkpoint to resume
  from. Returns the changed fields that ``allow_change`` let through.
  """
  saved = paths.read_json(paths.join(workdir, "config.json"))
  if saved is None:
    return []
  changed = changed_fields(saved, new)
  if changed and not allow_change:
    shown = ", ".join(f"{k} ({flatten(saved).get(k)!r} -> "
                      f"{flatten(new).get(k)!r})" for k in changed[:6])
    more = f" and {len(changed) - 6} more" if len(changed) > 6 else ""
    raise ConfigChanged(
        f"{workdir} holds a run with another config: {shown}{more}; use a new "
        "--workdir, or pass --allow_config_change to resume with it")
  return changed
