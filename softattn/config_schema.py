"""The training config's schema: defaults, key checks and resolution.

``default_config()`` is the schema, written once: every key the loop reads is
in it, with its default or a typed placeholder (``config_dict.placeholder``:
``None`` that still takes ``--config.x=...`` on the command line). The known
keys, top-level and per section, are derived from it (``known_keys``), so a
typo such as ``--config.totl_steps`` or ``config.optimizer.lr`` is a
``ConfigError`` naming the valid keys.

Free-form sections (``FREE_FORM``) are not checked here, because their keys
belong to what consumes them: ``data`` (the dataset and its preprocessing,
``softattn.data``), ``model`` (the model's constructor arguments; a wrong
one fails in ``build_model``), ``fewshot`` (``softattn.fewshot``) and
``mesh`` (``softattn.sharding.mesh_shape`` names the valid axes).

``resolve_config`` runs before anything compiles: it merges a config into
the defaults, checks names (loss, optimizer, schedule, normalizer, sharding
strategy, compute dtype), the mesh against the batch, the dataset, and fills
the derived fields (``total_steps`` from ``num_epochs``,
``model.num_classes``). Config files (``configs/*.py``) start from
``softattn.configlib.default_config()`` and never import the trainer.
"""

from __future__ import annotations

import math
from typing import Any

import ml_collections
from ml_collections import config_dict

COMPUTE_DTYPES = ("float32", "bfloat16")
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


def one_line(e: BaseException) -> str:
  """The first line of an exception's message (or its type name); a
  ``KeyError``'s message without the quotes ``str`` adds."""
  text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
  lines = text.strip().splitlines()
  return lines[0] if lines else type(e).__name__


def _merged(given: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
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


def _check_names(cfg) -> None:
  """Names resolvable without data or compilation."""
  # pylint: disable=g-import-not-at-top  (these import jax and the models)
  from softattn import losses, normalizers, optim, sharding
  try:
    losses.from_config(cfg.loss)
  except ValueError as e:
    raise ConfigError(one_line(e)) from None
  if cfg.optimizer.name not in optim.OPTIMIZERS:
    raise ConfigError(f"Unknown optimizer {cfg.optimizer.name!r}; set "
                      f"config.optimizer.name to one of {list(optim.OPTIMIZERS)}.")
  if cfg.schedule.name not in optim.SCHEDULES:
    raise ConfigError(f"Unknown schedule {cfg.schedule.name!r}; set "
                      f"config.schedule.name to one of {list(optim.SCHEDULES)}.")
  if cfg.compute_dtype not in COMPUTE_DTYPES:
    raise ConfigError(f"Unknown compute_dtype {cfg.compute_dtype!r}; use one "
                      f"of {list(COMPUTE_DTYPES)}.")
  norm_spec = cfg.model.get("normalizer", None)
  if norm_spec is not None:
    try:
      normalizers.get(norm_spec)
    except (ValueError, KeyError, TypeError) as e:
      raise ConfigError(f"config.model.normalizer={norm_spec!r}: "
                        f"{one_line(e)}") from None
  try:
    sharding.check_rules(cfg.sharding_rules)
  except (ValueError, TypeError) as e:
    raise ConfigError(one_line(e)) from None


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
                   dataset_info: dict | None = None
                   ) -> tuple[ml_collections.ConfigDict, dict]:
  """Checks ``config`` and fills derived fields; returns ``(config, dataset_info)``.

  Raises ``ConfigError`` (one line, naming the fix) for unknown keys, unknown
  loss/optimizer/schedule/normalizer/sharding names, a batch size the
  ``data`` axis does not divide, and a dataset that cannot be found.

  Args:
    config: a ``ConfigDict`` (or dict) over ``default_config()``.
    num_devices: devices of the mesh (default ``jax.device_count()``); e.g.
      the chips of a TPU topology compiled for ahead of time.
    dataset_info: ``dict(num_classes, image_shape, num_train, num_eval)``;
      when given, no dataset is looked up (compiling an ImageNet-21k config
      on a machine without the data).
  """
  cfg = _merged(check_keys(config))
  _check_names(cfg)
  _check_mesh(cfg, num_devices)
  info = dict(dataset_info) if dataset_info is not None else _dataset_info(cfg)
  # Length of the run.
  if cfg.total_steps is None:
    if not cfg.num_epochs:
      raise ConfigError("Set config.total_steps or config.num_epochs.")
    cfg.total_steps = int(math.ceil(
        cfg.num_epochs * info["num_train"] / cfg.batch_size))
  cfg.total_steps = int(cfg.total_steps)
  if cfg.total_steps < 1:
    raise ConfigError(f"total_steps={cfg.total_steps}; it must be >= 1.")
  with cfg.model.unlocked():
    if cfg.model.get("num_classes", None) is None:
      cfg.model.num_classes = int(info["num_classes"])
  return cfg, info


def build_model(cfg):
  """The Flax module ``config.model_name`` with ``config.model`` as arguments."""
  from softattn import models  # pylint: disable=g-import-not-at-top
  try:
    return models.build_model(cfg.model_name, **cfg.model.to_dict())
  except (ValueError, TypeError, KeyError) as e:
    raise ConfigError(f"config.model_name={cfg.model_name!r} / config.model: "
                      f"{one_line(e)}") from None
