"""What study-specific probes need: checkpoints (``probed``), images,
sown attention weights, parameters moved from init, a config's parameter
count and planned train-step memory. Probes run when ``runs.csv`` is
exported; their results are columns of it, so a report regenerated from
``runs.csv`` needs no checkpoint.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from softattn import configlib, paths
from softattn.models.abstract import build_abstract, input_shape, param_count


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


def probed(runs, keep=None):
  """``(run, checkpoint state)`` of each finished run that has a checkpoint,
  lowest seed first, so a probe that keeps one run per setting keeps the
  lowest seed's; ``keep(run)``, when given, picks the runs to read (asked
  before a checkpoint is restored)."""
  for r in sorted(runs, key=lambda r: r.seed):
    if not r.done or (keep is not None and not keep(r)):
      continue
    state = restore_checkpoint(r.dir)
    if state is not None:
      yield r, state


def load_images(config, split: str, n: int) -> tuple[np.ndarray, np.ndarray]:
  """The first ``n`` examples of ``split`` through the config's
  deterministic eval preprocessing: ``(images float32, integer labels)``."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from softattn.data import preprocess  # pylint: disable=g-import-not-at-top
  # take(n), not a "[:n]" suffix: the split may carry a slice already
  # (e.g. "test[:1000]"), which TFDS cannot slice again.
  ds = tfds.load(config.data.name, split=split, shuffle_files=False,
                 data_dir=config.data.get("data_dir", None)).take(n)
  pp = preprocess.parse(config.data.pp_eval)
  seed = tf.constant([0, 0], tf.int64)
  out = [pp(e, seed) for e in ds]
  return (np.stack([np.asarray(e["image"]) for e in out]).astype(np.float32),
          np.asarray([int(e["label"]) for e in out]))


def batch_stats(state) -> dict:
  """A checkpoint's BatchNorm statistics as ``apply`` variables ({} when
  the model has none), to join with its (or other) ``params``."""
  return {"batch_stats": state["batch_stats"]} if state.get(
      "batch_stats") else {}


def attention_weights(config, state, images) -> dict[str, np.ndarray]:
  """``{layer path: [images, heads, queries, keys]}``: the weights every
  attention layer sows (``softattn.nn.attention.observe``) on ``images``."""
  model = configlib.build_model(config)
  _, sown = model.apply({"params": state["params"], **batch_stats(state)},
                        images, train=False, mutable=["attention_weights"])
  return {re.sub(r"/weights/0$", "", name): np.asarray(w)
          for name, w in _named(sown["attention_weights"])}


def probed_attention(runs, n: int, keep=None):
  """``(run, attention_weights)`` of each run ``probed`` yields: the
  weights its layers sow on the first ``n`` test images."""
  for r, state in probed(runs, keep):
    x, _ = load_images(r.config, r.config.data.eval_split, n)
    yield r, attention_weights(r.config, state, x)


_PARAMS: dict[str, int] = {}


def model_params(config) -> int:
  """Parameter count of ``config``'s model (``jax.eval_shape``, no data;
  cached per model config and dataset)."""
  key = json.dumps([config.model.to_dict(), config.data.name],
                   sort_keys=True, default=repr)
  if key not in _PARAMS:
    _PARAMS[key] = param_count(build_abstract(config)[1])
  return _PARAMS[key]


def train_step_memory_mb(config, batch: int) -> float:
  """MB XLA plans for one forward + backward of ``config``'s model on a
  batch of ``batch`` (compiled ahead of time from shapes: no data, no
  accelerator); a RuntimeError when the backend gives no plan."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from softattn.aot import memory  # pylint: disable=g-import-not-at-top
  model, shapes = build_abstract(config)

  def loss(params, stats, x, y):
    logits, new = model.apply({"params": params, "batch_stats": stats}, x,
                              train=True, mutable=["batch_stats"])
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, y).mean(), new

  x = jax.ShapeDtypeStruct((batch, *input_shape(config)), jnp.float32)
  y = jax.ShapeDtypeStruct((batch,), jnp.int32)
  compiled = jax.jit(jax.grad(loss, has_aux=True)).lower(
      shapes["params"], shapes.get("batch_stats", {}), x, y).compile()
  planned = memory.memory_analysis_bytes(compiled)
  if planned is None:
    raise RuntimeError("XLA gave no memory_analysis() for the train step "
                       "on this backend; compile on CPU, which gives one")
  return planned / 2 ** 20


def init_params(config):
  """The parameters the training loop starts ``config`` from (its own
  ``train.init_state``, same seed); needs the dataset prepared."""
  from softattn import optim, sharding, train  # pylint: disable=g-import-not-at-top
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
    yield jax.tree_util.keystr(path, simple=True, separator="/"), leaf


def dump_json(path: str, obj: Any) -> None:
  paths.write_json(path, obj, sort_keys=True, default=repr)
