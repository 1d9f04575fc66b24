"""What study-specific probes need: models without data, checkpoints, images.

A probe reads a finished run's checkpoint (``restore_checkpoint``) and
computes something the metrics do not log: the attention weights the
layers sow (``attention_weights``), how far parameters moved from the
loop's own init (``moved_from_init``). Probes run when ``runs.csv`` is
exported; their results are columns of it, so a report regenerated from
``runs.csv`` needs no checkpoint.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from softattn import paths

# Image shapes of the datasets the studies use (for building models without
# the data: tests, memory analysis).
IMAGE_SHAPES = {"fashion_mnist": (28, 28, 1), "mnist": (28, 28, 1),
                "cifar10": (32, 32, 3), "cifar100": (32, 32, 3),
                "imagenet2012": (224, 224, 3), "imagenet21k": (224, 224, 3)}
NUM_CLASSES = {"fashion_mnist": 10, "mnist": 10, "cifar10": 10,
               "cifar100": 100, "imagenet2012": 1000, "imagenet21k": 21843}


def build_model(config):
  """The config's model, ``num_classes`` filled from the dataset name."""
  from softattn import models  # pylint: disable=g-import-not-at-top
  kw = config.model.to_dict()
  if kw.get("num_classes") is None:
    kw["num_classes"] = NUM_CLASSES[config.data.name]
  return models.build_model(config.model_name, **kw)


def build_abstract(config, image_shape=None):
  """``(model, variables shapes)`` of a config's model, via ``jax.eval_shape``
  (no data, no training: what the tests use to check every study config)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  name = config.data.name
  if image_shape is None:
    if name not in IMAGE_SHAPES:
      raise ValueError(f"no image shape known for dataset {name!r}; pass "
                       f"image_shape (known: {', '.join(IMAGE_SHAPES)})")
    image_shape = IMAGE_SHAPES[name]
  model = build_model(config)
  x = jax.ShapeDtypeStruct((2, *image_shape), jnp.float32)
  shapes = jax.eval_shape(
      lambda: model.init({"params": jax.random.key(0),
                          "dropout": jax.random.key(1)},
                         jnp.zeros(x.shape, x.dtype), train=False))
  return model, shapes


def param_count(shapes) -> int:
  """Number of trainable parameters in ``shapes['params']``."""
  import jax  # pylint: disable=g-import-not-at-top
  return int(sum(np.prod(s.shape) for s in
                 jax.tree.leaves(shapes.get("params", {}))))


def restore_checkpoint(run_dir: str):
  """The latest Orbax checkpoint of a run directory as a dict of arrays
  (``params``, ``batch_stats``, ...), or None when it has none."""
  ckpt = str(paths.path(paths.join(run_dir, "checkpoints")))  # Orbax: absolute
  if not paths.isdir(ckpt):
    return None
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  mngr = ocp.CheckpointManager(ckpt)
  step = mngr.latest_step()
  if step is None:
    return None
  return mngr.restore(step, args=ocp.args.StandardRestore())


def load_images(config, split: str, n: int) -> tuple[np.ndarray, np.ndarray]:
  """The first ``n`` examples of ``split`` through the config's
  deterministic eval preprocessing: ``(images float32, integer labels)``."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from softattn.data import preprocess  # pylint: disable=g-import-not-at-top
  ds = tfds.load(config.data.name, split=f"{split}[:{n}]",
                 data_dir=config.data.get("data_dir", None))
  pp = preprocess.parse(config.data.pp_eval)
  seed = tf.constant([0, 0], tf.int64)
  out = [pp(e, seed) for e in ds]
  return (np.stack([np.asarray(e["image"]) for e in out]).astype(np.float32),
          np.asarray([int(e["label"]) for e in out]))


def attention_weights(config, state, images) -> dict[str, np.ndarray]:
  """``{layer path: [images, heads, queries, keys]}``: the weights every
  attention layer sows (``softattn.nn.attention.observe``) on ``images``."""
  import jax  # pylint: disable=g-import-not-at-top
  model = build_model(config)
  variables = {"params": state["params"]}
  if state.get("batch_stats"):
    variables["batch_stats"] = state["batch_stats"]
  _, sown = model.apply(variables, images, train=False,
                        mutable=["attention_weights"])
  flat = jax.tree_util.tree_flatten_with_path(sown["attention_weights"])[0]
  out = {}
  for path, w in flat:
    name = "/".join(str(getattr(p, "key", getattr(p, "idx", p)))
                    for p in path)
    out[re.sub(r"/weights/0$", "", name)] = np.asarray(w)
  return out


def init_params(config):
  """The parameters the training loop starts ``config`` from (its own
  ``train.init_state``, same seed); needs the dataset prepared."""
  from softattn import configlib, optim, sharding, train  # pylint: disable=g-import-not-at-top
  cfg, info = configlib.resolve_config(config)
  model = configlib.build_model(cfg)
  tx, _ = optim.make_optimizer(cfg, int(cfg.total_steps))
  state, _ = train.init_state(cfg, model, tx, info,
                              sharding.make_mesh(cfg.mesh))
  return state["params"]


def moved_from_init(config, state, pattern: str) -> float | None:
  """``||theta_T - theta_0|| / ||theta_0||`` over the parameters whose path
  matches ``pattern`` (a regex, e.g. ``(x|y)_weights``): how far training
  moved them from the loop's init; None when nothing matches."""
  init = init_params(config)
  flat0 = dict(_named(init))
  num = den = 0.0
  for name, w in _named(state["params"]):
    if re.search(pattern, name) and name in flat0:
      w0 = np.asarray(flat0[name], np.float64)
      num += float(np.sum((np.asarray(w, np.float64) - w0) ** 2))
      den += float(np.sum(w0 ** 2))
  return None if den == 0 else float(np.sqrt(num / den))


def _named(tree):
  import jax  # pylint: disable=g-import-not-at-top
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    yield "/".join(str(getattr(p, "key", getattr(p, "idx", p)))
                   for p in path), leaf


def dump_json(path: str, obj: Any) -> None:
  paths.write_json(path, obj, sort_keys=True, default=repr)
