"""The one way to resolve a config and build its model.

``resolve_config(config)`` checks a config against everything it names
(keys, registered names, mesh, dataset) and fills its derived fields, before
anything compiles; ``build_model(config)`` builds the model it names, the
one way to build a model, its fields checked. Both raise ``ConfigError``
(``softattn.config_schema``, re-exported here with the schema's
``default_config``, ``check_keys``, ``known_keys`` and ``one_line``) with one
line naming the fix.

Where a config comes from is not this module's job: ``softattn.config_files``
runs config files (``load_file``, ``parse_arg`` for their ``:arg``),
``softattn.config_overrides`` applies ``--config.<field>=<value>``. Importing
this module stays light; ``resolve_config`` imports the modules that register
their checks with the schema.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import ml_collections

from softattn import config_schema
from softattn.config_schema import (ConfigError, check_keys, default_config,
                                    known_keys, one_line)

__all__ = ["ConfigError", "check_keys", "default_config", "known_keys",
           "one_line", "Resolved", "resolve_config", "build_model"]


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
  # Length of the run (0: evaluate only).
  derived = cfg.total_steps is None
  if derived:
    if not cfg.num_epochs:
      raise ConfigError("Set config.total_steps or config.num_epochs.")
    cfg.total_steps = int(math.ceil(
        cfg.num_epochs * info["num_train"] / cfg.batch_size))
  cfg.total_steps = int(cfg.total_steps)
  if derived and cfg.total_steps < 1:  # set ones are bounded (BOUNDS)
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
  """The model a config names: the Flax module ``config.model_name``
  (``softattn.models.names()``) with ``config.model`` as its arguments. The
  one way to build a model, from a config or a mapping of the same shape
  (``{"model_name": "vit", "model": {"variant": "S/16", ...}}``).

  An unset ``model.num_classes`` (a config ``resolve_config`` has not
  completed) is the dataset's, ``config.data.name``, from its offline facts
  (``softattn.data.datasets.KNOWN``): nothing is read. Constructing the
  model traces nothing; an unknown model or field, or a wrong one (a ViT
  variant, a head count that does not divide the width, depth 0), is a
  ``ConfigError`` naming it. With ``image_shape`` (``(H, W, C)``, the
  resolved ``dataset_info["image_shape"]``) a model that has
  ``check_input`` also checks it takes such images (a ViT's patch must
  divide them).
  """
  from softattn import models  # pylint: disable=g-import-not-at-top
  if not isinstance(cfg, ml_collections.ConfigDict):
    cfg = ml_collections.ConfigDict(dict(cfg))
  kwargs = cfg.model.to_dict()
  if kwargs.get("num_classes") is None and cfg.get("data") and cfg.data.get(
      "name"):
    kwargs["num_classes"] = _known_num_classes(cfg.data.name)
  try:
    model = models.model_class(cfg.model_name)(**kwargs)
    if image_shape is not None and hasattr(model, "check_input"):
      model.check_input(tuple(image_shape))
  except (ValueError, TypeError, KeyError) as e:
    raise ConfigError(f"config.model_name={cfg.model_name!r} / config.model: "
                      f"{one_line(e)}") from None
  return model


def _known_num_classes(name: str) -> int:
  from softattn.data import datasets  # pylint: disable=g-import-not-at-top
  try:
    return datasets.known(name).num_classes
  except ValueError as e:
    raise ConfigError(f"config.model.num_classes is not set and "
                      f"{one_line(e)}; set config.model.num_classes.") from None
