"""The training config's schema: defaults, key checks and a registry of checks.

``default_config()`` is the schema, written once: every key the loop reads is
in it, with its default or a typed placeholder (``config_dict.placeholder``:
``None`` that still takes ``--config.x=...`` on the command line). The known
keys, top-level and per section, are derived from it (``known_keys``), so a
typo such as ``--config.totl_steps`` or ``config.optimizer.lr`` is a
``ConfigError`` naming the valid keys.

Free-form sections (``FREE_FORM``) are not checked here, because their keys
belong to what consumes them: ``data`` (the dataset and its preprocessing,
``softattn.data``), ``model`` (the model's constructor arguments; a wrong
one fails in ``configlib.build_model``), ``fewshot`` (``softattn.fewshot``)
and ``mesh`` (``softattn.sharding.mesh_shape`` names the valid axes).

Counts have bounds (``BOUNDS``, ``check_bounds``): a batch size of 0 or a
negative cadence is a ``ConfigError`` here, not a crash in the loop.

This module is the bottom of the import graph: it imports nothing of
softattn. The modules that read a field register its valid values here
(``register_names``, ``register_check``); ``softattn.configlib.resolve_config``
(the one way to resolve a config) runs them with the mesh and dataset checks.
Config files (``configs/*.py``) start from ``default_config()`` and never
import the trainer.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, NamedTuple, Sequence

import ml_collections
from ml_collections import config_dict

FREE_FORM = ("data", "model", "fewshot", "mesh")


class ConfigError(ValueError):
  """A config problem, found before compilation; the message names the fix."""


def default_config() -> ml_collections.ConfigDict:
  """Defaults every config starts from (``configs/*.py`` override them)."""
  ph = config_dict.placeholder
  c = ml_collections.ConfigDict()
  c.name = ph(str)          # free text for the run's records
  c.description = ph(str)
  c.runlocal = False        # set by configs' ``runlocal`` argument
  c.seed = 0
  # Typed "None"s so that --config.total_steps=... works on the command line.
  c.total_steps = ph(int)
  c.num_epochs = ph(float)
  c.batch_size = 128
  c.data = ml_collections.ConfigDict()
  c.model_name = "vit"
  c.model = ml_collections.ConfigDict()
  # softattn.optim.make_optimizer reads these.
  c.optimizer = ml_collections.ConfigDict(dict(
      name="adamw", b1=0.9, b2=0.999, eps=1e-8, mu_dtype=ph(str),
      weight_decay=0.0, decay_min_ndim=2,
      momentum=0.9, nesterov=False,   # sgd only
      grad_clip_norm=ph(float), ema_decay=0.0,
      groups=ph(list)))               # list of dict(pattern=..., overrides)
  # softattn.optim.make_schedule reads these; each schedule uses some.
  c.schedule = ml_collections.ConfigDict(dict(
      name="warmup_cosine", base_lr=1e-3, warmup_steps=0,
      warmup_epochs=ph(float),        # used when warmup_steps is None
      init_lr=0.0, end_lr=0.0,
      boundaries=ph(list), boundary_epochs=ph(list), decay_factor=0.1))  # step
  # softattn.losses: gamma/tau/normalizer are parameters of some losses
  # (losses.PARAMS); setting one the loss does not take is an error.
  c.loss = ml_collections.ConfigDict(dict(
      name="softmax_xent", label_smoothing=0.0, gamma=ph(float), tau=ph(float),
      normalizer=ph(str),
      mixup_alpha=0.0, cutmix_alpha=0.0, switch_prob=0.5))
  c.mesh = ml_collections.ConfigDict(dict(data=-1, model=1))
  c.sharding_rules = [(".*", "replicate")]
  c.log_every = 50
  c.eval_every = 1000
  c.checkpoint_every = 1000
  c.keep_checkpoints = 3
  c.checkpoint_async = True
  c.compute_dtype = "float32"
  c.diagnostics = True
  c.eval = ml_collections.ConfigDict(dict(
      batch_size=ph(int), i1k_from_i21k=False,
      i21k_wnids_file=ph(str), i1k_data=None))
  c.fewshot = ml_collections.ConfigDict(dict(datasets={}, every=0))
  # Weights from another run or a big_vision .npz (softattn.init_from).
  c.init_from = ml_collections.ConfigDict(dict(
      path=ph(str), step=ph(int), skip=""))
  c.multihost = False
  c.verbose = True
  return c


def known_keys() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
  """``(top-level keys, {section: keys})`` of ``default_config()``.

  Sections in ``FREE_FORM`` are left out: their keys are not checked here.
  """
  defaults = default_config()
  sections = {k: frozenset(v.keys()) for k, v in defaults.items()
              if isinstance(v, ml_collections.ConfigDict) and k not in FREE_FORM}
  return frozenset(defaults.keys()), sections


def _as_config(config) -> ml_collections.ConfigDict:
  if isinstance(config, ml_collections.ConfigDict):
    return config
  return ml_collections.ConfigDict(config)


def check_keys(config) -> ml_collections.ConfigDict:
  """Rejects keys that ``default_config()`` does not have (``ConfigError``)."""
  given = _as_config(config)
  top, sections = known_keys()
  unknown = sorted(set(given.keys()) - top)
  if unknown:
    raise ConfigError(f"Unknown config key(s) {unknown}; valid top-level keys "
                      f"are {sorted(top)}.")
  for sec, keys in sections.items():
    if sec in given and given[sec] is not None:
      bad = sorted(set(given[sec].keys()) - keys)
      if bad:
        raise ConfigError(f"Unknown key(s) {bad} in config.{sec}; valid keys "
                          f"are {sorted(keys)}.")
  return given


def did_you_mean(key: str, valid) -> str:
  """`` (did you mean 'x'?)`` for the nearest of ``valid`` to ``key``, or
  ``""``: the hint of a one-line error about an unknown name."""
  close = difflib.get_close_matches(key, list(valid), n=1)
  return f" (did you mean {close[0]!r}?)" if close else ""


def one_line(e: BaseException) -> str:
  """The first line of an exception's message (or its type name); a
  ``KeyError``'s message without the quotes ``str`` adds."""
  text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
  lines = text.strip().splitlines()
  return lines[0] if lines else type(e).__name__


def merged(given: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """``given`` over the defaults; checked sections merge key by key."""
  cfg = default_config()
  with cfg.unlocked():
    for k in given.keys():
      v = given[k]
      if isinstance(v, ml_collections.ConfigDict) and isinstance(
          cfg.get(k), ml_collections.ConfigDict) and k not in ("data", "model"):
        for kk in v.keys():
          cfg[k][kk] = v[kk]
      else:
        cfg[k] = v
  return cfg


# ----------------------------------------------------------------------------
# Numeric ranges: the schema's own knowledge of what a count may be.
#
# Without them a batch of 0 divided by zero in the loop, a negative one
# passed the mesh's divisibility check, and a negative cadence silently meant
# something: each after the workdir, config.json and a status were written.


class Bound(NamedTuple):
  """``config.<field>`` must be ``>= least`` (``> least`` when ``strict``);
  ``None`` (a placeholder left unset) passes. ``meaning`` says what the
  boundary value does, ``fix`` what to set."""
  field: str
  least: float
  fix: str
  meaning: str = ""
  strict: bool = False


BOUNDS = (
    Bound("batch_size", 1, "set --config.batch_size to the global batch size, "
          "a multiple of the devices on the mesh's data axis"),
    Bound("eval.batch_size", 1, "set --config.eval.batch_size, or leave it "
          "unset in the config file to use batch_size"),
    Bound("total_steps", 0, "set --config.total_steps to the number of "
          "training steps", "0: evaluate only, e.g. init_from's weights at "
          "another resolution"),
    Bound("num_epochs", 0, "set --config.num_epochs to a positive number, or "
          "set total_steps instead", strict=True),
    Bound("log_every", 0, "set --config.log_every=50, say", "0: never"),
    Bound("eval_every", 0, "set --config.eval_every=1000, say",
          "0: only at the last step"),
    Bound("checkpoint_every", 0, "set --config.checkpoint_every=1000, say",
          "0: only at the last step"),
    Bound("keep_checkpoints", 0, "set --config.keep_checkpoints=3, say",
          "0: keep all"),
    Bound("fewshot.every", 0, "set config.fewshot.every in the config file",
          "0: only at the last step"),
    Bound("schedule.warmup_steps", 0, "set --config.schedule.warmup_steps=0 "
          "for no warmup"),
    Bound("schedule.warmup_epochs", 0, "set --config.schedule.warmup_epochs=0 "
          "for no warmup"),
)


def check_bounds(cfg) -> None:
  """Every ``BOUNDS`` field of ``cfg`` is in range, or ``ConfigError``.

  A value of the wrong type (a string for a count) is left to its consumer;
  booleans are not counts either.
  """
  for b in BOUNDS:
    value = _field(cfg, b.field)
    if value is None or isinstance(value, bool) or not isinstance(
        value, (int, float)):
      continue
    if value > b.least or (value == b.least and not b.strict):
      continue
    meaning = f" ({b.meaning})" if b.meaning else ""
    raise ConfigError(
        f"config.{b.field}={value!r} is invalid; it must be "
        f"{'>' if b.strict else '>='} {b.least}{meaning}: {b.fix}.")


# ----------------------------------------------------------------------------
# Checks the consumers register.
#
# Which values a field takes belongs to the module that reads it: ``optim``
# knows its optimizers and schedules, ``losses`` its losses, ``normalizers``
# the normalizer specs, ``sharding`` the rule strategies, ``steps`` the
# compute dtypes. Each registers its check here when it is imported, so this
# module imports none of them and stays at the bottom of the import graph
# (tests/test_configs.py checks it). The schema only says which fields must be
# checked; ``softattn.configlib.resolve_config`` imports the owners and runs
# their checks.

CHECKED = ("loss", "optimizer.name", "schedule.name", "compute_dtype",
           "model.normalizer", "sharding_rules")
_CHECKS: dict[str, Callable[[Any], Any]] = {}


def register_check(field: str, check: Callable[[Any], Any]) -> None:
  """Registers ``check(value of config.<field>)`` for a field in ``CHECKED``.

  ``check`` raises ``ValueError``/``TypeError``/``KeyError`` with one line that
  names the field and the fix. Registering a field again replaces its check
  (a module reloaded in a notebook registers again).
  """
  if field not in CHECKED:
    raise ValueError(f"config field {field!r} is not in config_schema.CHECKED "
                     f"{list(CHECKED)}; add it there first.")
  _CHECKS[field] = check


def register_names(field: str, names: Sequence[str]) -> None:
  """Registers the check "``config.<field>`` is one of ``names``"."""
  valid, what = tuple(names), field.split(".")[0]

  def check(value):
    if value not in valid:
      raise ValueError(f"Unknown {what} {value!r}; set config.{field} to one "
                       f"of {list(valid)}.")
  register_check(field, check)


def _field(cfg, path: str) -> Any:
  value = cfg
  for key in path.split("."):
    value = value.get(key, None) if value is not None else None
  return value


def check_fields(cfg) -> None:
  """Runs every registered check on ``cfg`` (merged over the defaults).

  Raises:
    ConfigError: a field's value is invalid (the owner's one line), or a
      field in ``CHECKED`` has no check because its owner was not imported.
  """
  missing = [f for f in CHECKED if f not in _CHECKS]
  if missing:
    raise ConfigError(
        f"no check registered for config field(s) {missing}; resolve configs "
        f"with softattn.configlib.resolve_config, which imports the modules "
        f"that register them.")
  for field in CHECKED:
    try:
      _CHECKS[field](_field(cfg, field))
    except (ValueError, TypeError, KeyError) as e:
      raise ConfigError(one_line(e)) from None
