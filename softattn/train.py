"""The training loop: ``train_and_evaluate(config, workdir)``.

One code path for a laptop CPU, a GPU and a TPU pod:

* the config is checked first (``resolve_config``): a typo, an unknown
  normalizer, a batch that does not split over the ``data`` axis or a missing
  dataset is one ``ConfigError`` line naming the fix, before anything compiles;
* a ``("data", "model")`` mesh from ``config.mesh``; parameters are initialised
  directly sharded (``jax.jit(init, out_shardings=...)``) by the
  ``config.sharding_rules``; batches are global ``jax.Array``s split over
  ``data``; the train step is ``jax.jit`` with the state donated;
* Orbax checkpoints every ``checkpoint_every`` steps, at the end and on
  SIGTERM, auto-resumed from ``workdir``. The batch at step ``k`` and the
  dropout/mixup randomness at step ``k`` are pure functions of
  ``(seed, k)``, so a resumed run is bitwise the run that was not interrupted;
* CLU writers: TensorBoard events and ``metrics.jsonl`` in ``workdir``,
  ``ReportProgress`` (steps/s, ETA), a parameter overview at the start, and at
  log steps the attention diagnostics the models sow (score std, entropy,
  gradient saturation) plus per-layer gradient and parameter norms;
* a non-finite loss or gradient stops the run with a ``NonFiniteError``
  naming the step and the offending statistics; no checkpoint is written after
  it, so the last good one stays the latest;
* ``status.json`` says ``running``/``done``/``failed`` with the reason, the
  step, XLA's FLOP count of the train step and the process CPU seconds.

The workdir layout is documented in ``docs/training.md``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from ml_collections import config_dict
import optax
from absl import logging
from clu import parameter_overview, periodic_actions

from softattn import (checkpointing, evaluate, init_from as init_from_lib,
                      losses, metrics as metrics_lib,
                      optim, sharding)


class ConfigError(ValueError):
  """A config problem, found before compilation; the message names the fix."""


class NonFiniteError(FloatingPointError):
  """The loss or the gradients became NaN/Inf; the message names the step."""


# Top-level config keys the loop understands. Anything else is a typo.
KNOWN_KEYS = frozenset({
    "seed", "total_steps", "num_epochs", "batch_size", "data", "model_name",
    "model", "optimizer", "schedule", "loss", "mesh", "sharding_rules",
    "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
    "compute_dtype", "diagnostics", "eval", "fewshot", "multihost", "verbose",
    "name", "description", "runlocal", "checkpoint_async", "init_from",
})
_SUBKEYS = {
    "optimizer": {"name", "b1", "b2", "eps", "mu_dtype", "weight_decay",
                  "decay_min_ndim", "momentum", "nesterov", "grad_clip_norm",
                  "ema_decay", "groups"},
    "schedule": {"name", "base_lr", "warmup_steps", "warmup_epochs", "init_lr",
                 "end_lr", "boundaries", "boundary_epochs", "decay_factor"},
    "loss": {"name", "label_smoothing", "gamma", "tau", "mixup_alpha",
             "cutmix_alpha", "switch_prob"},
    "eval": {"batch_size", "i1k_from_i21k", "i21k_wnids_file", "i1k_data"},
    "init_from": {"path", "step", "skip"},
}
COMPUTE_DTYPES = ("float32", "bfloat16")


def default_config() -> ml_collections.ConfigDict:
  """Defaults every config starts from (``configs/*.py`` override them)."""
  c = ml_collections.ConfigDict()
  c.seed = 0
  # Typed "None"s so that --config.total_steps=... works on the command line.
  c.total_steps = config_dict.placeholder(int)
  c.num_epochs = config_dict.placeholder(float)
  c.batch_size = 128
  c.data = ml_collections.ConfigDict()
  c.model_name = "vit"
  c.model = ml_collections.ConfigDict()
  c.optimizer = ml_collections.ConfigDict(dict(
      name="adamw", b1=0.9, b2=0.999, weight_decay=0.0,
      grad_clip_norm=config_dict.placeholder(float),
      mu_dtype=config_dict.placeholder(str), ema_decay=0.0))
  c.schedule = ml_collections.ConfigDict(dict(
      name="warmup_cosine", base_lr=1e-3, warmup_steps=0))
  c.loss = ml_collections.ConfigDict(dict(
      name="softmax_xent", label_smoothing=0.0, mixup_alpha=0.0,
      cutmix_alpha=0.0))
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
      batch_size=config_dict.placeholder(int), i1k_from_i21k=False,
      i21k_wnids_file=config_dict.placeholder(str), i1k_data=None))
  c.fewshot = ml_collections.ConfigDict(dict(datasets={}, every=0))
  # Weights from another run or a big_vision .npz (softattn.init_from).
  c.init_from = ml_collections.ConfigDict(dict(
      path=config_dict.placeholder(str), step=config_dict.placeholder(int),
      skip=""))
  c.multihost = False
  c.verbose = True
  return c


def _one_line(e: BaseException) -> str:
  msg = str(e).strip().splitlines()
  return msg[0] if msg else type(e).__name__


def check_keys(config) -> ml_collections.ConfigDict:
  """Rejects unknown top-level keys and unknown optimizer/schedule/loss/eval keys."""
  given = ml_collections.ConfigDict(config) if not isinstance(
      config, ml_collections.ConfigDict) else config
  unknown = sorted(set(given.keys()) - KNOWN_KEYS)
  if unknown:
    raise ConfigError(f"Unknown config key(s) {unknown}; valid top-level keys "
                      f"are {sorted(KNOWN_KEYS)}.")
  for sec, keys in _SUBKEYS.items():
    if sec in given and given[sec] is not None:
      bad = sorted(set(given[sec].keys()) - keys)
      if bad:
        raise ConfigError(f"Unknown key(s) {bad} in config.{sec}; valid keys "
                          f"are {sorted(keys)}.")
  return given


def resolve_config(config, *, num_devices: int | None = None,
                   dataset_info: dict | None = None
                   ) -> tuple[ml_collections.ConfigDict, dict]:
  """Checks ``config`` and fills derived fields; returns ``(config, dataset_info)``.

  Runs before any compilation. Raises ``ConfigError`` (one line, naming the
  fix) for unknown keys, unknown loss/optimizer/schedule/normalizer/model/
  sharding names, a batch size the ``data`` axis does not divide, and a
  dataset that cannot be found.
  """
  from softattn import data as data_lib  # pylint: disable=g-import-not-at-top
  from softattn import normalizers  # pylint: disable=g-import-not-at-top
  cfg = default_config()
  given = check_keys(config)
  with cfg.unlocked():
    for k in given.keys():
      v = given[k]
      if isinstance(v, ml_collections.ConfigDict) and k in cfg and isinstance(
          cfg[k], ml_collections.ConfigDict) and k not in ("data", "model"):
        for kk in v.keys():
          cfg[k][kk] = v[kk]
      else:
        cfg[k] = v

  # Names resolvable without data or compilation.
  try:
    losses.get(cfg.loss.name)
  except ValueError as e:
    raise ConfigError(_one_line(e)) from None
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
                        f"{_one_line(e)}") from None
  try:
    sharding.check_rules(cfg.sharding_rules)
  except (ValueError, TypeError) as e:
    raise ConfigError(_one_line(e)) from None

  # Mesh and batch divisibility.
  n = jax.device_count() if num_devices is None else num_devices
  try:
    n_data, _ = sharding.mesh_shape(cfg.mesh, n)
  except ValueError as e:
    raise ConfigError(_one_line(e)) from None
  if cfg.batch_size % n_data:
    raise ConfigError(
        f"batch_size={cfg.batch_size} is not divisible by the mesh's data axis "
        f"({n_data} devices); set --config.batch_size to a multiple of {n_data} "
        f"or change config.mesh.")
  eval_bs = cfg.eval.batch_size or cfg.batch_size
  if eval_bs % n_data:
    raise ConfigError(f"config.eval.batch_size={eval_bs} is not divisible by "
                      f"the data axis ({n_data}); use a multiple of {n_data}.")

  # Dataset: must exist (a missing one is a config error, not a crash later).
  if not cfg.data.get("name", None):
    raise ConfigError("config.data.name is not set; use a TFDS name such as "
                      "fashion_mnist, cifar10, cifar100, imagenet2012, imagenet21k.")
  if dataset_info is not None:
    info = dict(dataset_info)
  else:
    try:
      info = dict(data_lib.dataset_info(cfg.data))
    except Exception as e:  # pylint: disable=broad-except
      raise ConfigError(f"config.data (dataset {cfg.data.name!r}): "
                        f"{_one_line(e)}") from None

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


def _build_model(cfg):
  from softattn import models  # pylint: disable=g-import-not-at-top
  try:
    return models.build_model(cfg.model_name, **cfg.model.to_dict())
  except (ValueError, TypeError, KeyError) as e:
    raise ConfigError(f"config.model_name={cfg.model_name!r} / config.model: "
                      f"{_one_line(e)}") from None


# ----------------------------------------------------------------------------
# Train state and steps.


def _cast(tree, dtype):
  return jax.tree.map(
      lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
      tree)


def _flatten_named(tree, prefix: str) -> dict[str, jax.Array]:
  """``{"prefix/a/b": leaf}``; tuples from ``sow`` lose their index."""
  sums: dict[str, list] = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    keys = optim.path_str(path).split("/")
    if len(keys) > 1 and keys[-1].isdigit():  # sow's tuple index
      keys = keys[:-1]
    sums.setdefault("/".join([prefix] + keys), []).append(jnp.mean(leaf))
  # A module called twice sows twice: report the mean.
  return {k: sum(v) / len(v) for k, v in sums.items()}


def _layer_norms(tree, prefix: str, depth: int = 2) -> dict[str, jax.Array]:
  """L2 norm per layer: leaves grouped by the first ``depth`` module names.

  ``Transformer/encoderblock_3/MlpBlock_0/Dense_0/kernel`` counts for
  ``Transformer/encoderblock_3``; ``head/kernel`` for ``head``.
  """
  groups: dict[str, list] = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    modules = optim.path_str(path).split("/")[:-1] or ["_"]
    groups.setdefault("/".join(modules[:depth]), []).append(leaf)
  return {f"{prefix}/{k}": optax.tree.norm(v) for k, v in groups.items()}


@dataclasses.dataclass
class Steps:
  """The jitted functions of one run (built once, used by the loop)."""
  train: Callable
  diagnostics: Callable
  eval: Callable
  features: Callable
  eval_i1k: Callable | None = None


def make_steps(cfg, model, tx, schedule, mesh, state_sharding) -> Steps:
  """Jitted train/diagnostics/eval steps with the given shardings."""
  from softattn.data import mix  # pylint: disable=g-import-not-at-top
  num_classes = int(cfg.model.num_classes)
  loss_kwargs = {k: cfg.loss[k] for k in ("gamma", "tau")
                 if k in cfg.loss and cfg.loss[k] is not None}
  loss_fn_ = losses.get(cfg.loss.name, **loss_kwargs)
  compute_dtype = jnp.dtype(cfg.compute_dtype)
  ema_decay = float(cfg.optimizer.get("ema_decay", 0.0) or 0.0)
  base_rng = jax.random.key(int(cfg.seed))
  mixup_alpha = float(cfg.loss.get("mixup_alpha", 0.0) or 0.0)
  cutmix_alpha = float(cfg.loss.get("cutmix_alpha", 0.0) or 0.0)
  switch_prob = float(cfg.loss.get("switch_prob", 0.5))
  smoothing = float(cfg.loss.get("label_smoothing", 0.0) or 0.0)
  batch_sh = sharding.batch_sharding(mesh)
  repl = sharding.replicated(mesh)

  def targets_and_images(rng, batch):
    images = batch["image"]
    onehot = jax.nn.one_hot(batch["label"], num_classes, dtype=jnp.float32)
    if mixup_alpha or cutmix_alpha:
      images, onehot = mix.mixup_cutmix(
          rng, images, onehot, mixup_alpha=mixup_alpha,
          cutmix_alpha=cutmix_alpha, switch_prob=switch_prob)
    return images, losses.smooth_labels(onehot, smoothing)

  def forward(params, batch_stats, images, *, train, rng=None, mutable=()):
    # Cast first, then all-gather over `data` (in compute dtype: half the
    # traffic in bf16); see sharding.gather_for_compute for why.
    variables = {"params": sharding.gather_for_compute(
        _cast(params, compute_dtype), cfg.sharding_rules, mesh)}
    if batch_stats:
      variables["batch_stats"] = batch_stats
    mutable = list(mutable) + (["batch_stats"] if train and batch_stats else [])
    rngs = {"dropout": rng} if rng is not None else {}
    logits, new_vars = model.apply(
        variables, images.astype(compute_dtype), train=train, rngs=rngs,
        mutable=mutable)
    return logits.astype(jnp.float32), new_vars

  def loss_and_aux(params, batch_stats, images, targets, rng):
    logits, new_vars = forward(params, batch_stats, images, train=True, rng=rng)
    loss = jnp.mean(loss_fn_(logits, targets))
    return loss, (logits, new_vars.get("batch_stats", batch_stats))

  def train_step(state, batch):
    step = state["step"]
    rng = jax.random.fold_in(base_rng, step)
    mix_rng, drop_rng = jax.random.split(rng)
    images, targets = targets_and_images(mix_rng, batch)
    (loss, (logits, new_bs)), grads = jax.value_and_grad(
        loss_and_aux, has_aux=True)(state["params"], state["batch_stats"],
                                    images, targets, drop_rng)
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    new_state = dict(state, step=step + 1, params=params, opt_state=opt_state,
                     batch_stats=new_bs)
    if ema_decay:
      new_state["ema_params"] = optax.incremental_update(
          params, state["ema_params"], 1.0 - ema_decay)
    grad_leaves = jax.tree.leaves(grads)
    metrics = {
        "loss": loss,
        "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["label"]),
        "grad_norm": optax.tree.norm(grads),
        "param_norm": optax.tree.norm(params),
        "learning_rate": schedule(step),
        # Per-leaf finiteness: names the offending parameters if it breaks.
        "grads_finite": jnp.stack([jnp.all(jnp.isfinite(g)) for g in grad_leaves]),
        "nonfinite_grads": sum(jnp.sum(~jnp.isfinite(g)) for g in grad_leaves),
    }
    return new_state, metrics

  def diagnostics_step(state, batch):
    # Dense-path attention diagnostics + per-layer norms, on this step's batch
    # before the update; deterministic (no dropout), so cheap to compare.
    def loss_diag(params):
      logits, new_vars = forward(params, state["batch_stats"], batch["image"],
                                 train=False, mutable=["diagnostics"])
      onehot = jax.nn.one_hot(batch["label"], num_classes, dtype=jnp.float32)
      return jnp.mean(loss_fn_(logits, onehot)), new_vars.get("diagnostics", {})
    grads, diag = jax.grad(loss_diag, has_aux=True)(state["params"])
    out = _flatten_named(diag, "diag")
    out.update(_layer_norms(grads, "grad_norm"))
    out.update(_layer_norms(state["params"], "param_norm"))
    return out

  def make_eval_step(class_indices=None):
    def eval_step(params, batch_stats, batch):
      logits, _ = forward(params, batch_stats, batch["image"], train=False)
      if class_indices is not None:  # e.g. i21k logits -> the 1000 i1k ones
        logits = evaluate.restrict_logits(logits, class_indices)
      mask = batch["mask"].astype(jnp.float32)
      onehot = jax.nn.one_hot(batch["label"], logits.shape[-1], dtype=jnp.float32)
      per_ex = loss_fn_(logits, onehot)
      correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
      return {"loss_sum": jnp.sum(per_ex * mask),
              "correct": jnp.sum(correct * mask), "count": jnp.sum(mask)}
    return jax.jit(eval_step, in_shardings=(
        state_sharding["params"], state_sharding["batch_stats"], batch_sh),
                   out_shardings=repl)

  def features_step(params, batch_stats, images):
    _, new_vars = forward(params, batch_stats, images, train=False,
                          mutable=["intermediates"])
    feats = jax.tree.leaves(new_vars["intermediates"].get("pre_logits", ()))
    if not feats:
      raise ValueError(f"Model {cfg.model_name!r} does not sow "
                       "intermediates/pre_logits; the few-shot probe needs it.")
    return feats[0].astype(jnp.float32)

  train = jax.jit(train_step, in_shardings=(state_sharding, batch_sh),
                  out_shardings=(state_sharding, repl), donate_argnums=(0,))
  diagnostics = jax.jit(diagnostics_step, in_shardings=(state_sharding, batch_sh),
                        out_shardings=repl)
  evaluate_ = make_eval_step()
  eval_i1k = None
  if cfg.eval.get("i1k_from_i21k", False):
    eval_i1k = make_eval_step(evaluate.default_i1k_indices(
        cfg.eval.get("i21k_wnids_file", None)))
  features = jax.jit(features_step, in_shardings=(
      state_sharding["params"], state_sharding["batch_stats"], batch_sh),
                     out_shardings=batch_sh)
  return Steps(train=train, diagnostics=diagnostics, eval=evaluate_,
               features=features, eval_i1k=eval_i1k)


def init_state(cfg, model, tx, info, mesh, *, abstract: bool = False):
  """``(state, state_sharding)``: the train state created directly sharded.

  ``abstract=True`` returns ``jax.ShapeDtypeStruct``s (with shardings) instead,
  without computing anything: the restore target when resuming, so a resumed
  run never holds two copies of the state.
  """
  h, w, c = info["image_shape"]
  dummy = jnp.zeros((1, h, w, c), jnp.float32)
  ema = bool(cfg.optimizer.get("ema_decay", 0.0))

  def init_fn():
    rng = jax.random.key(int(cfg.seed))
    p_rng, d_rng = jax.random.split(jax.random.fold_in(rng, 2**31 - 1))
    variables = model.init({"params": p_rng, "dropout": d_rng}, dummy,
                           train=False)
    params = variables["params"]
    state = {"step": jnp.zeros((), jnp.int32), "params": params,
             "batch_stats": variables.get("batch_stats", {}),
             "opt_state": tx.init(params)}
    if ema:
      state["ema_params"] = jax.tree.map(jnp.copy, params)
    return state

  shapes = jax.eval_shape(init_fn)
  state_sharding = sharding.tree_shardings(shapes, cfg.sharding_rules, mesh)
  if abstract:
    return jax.tree.map(
        lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
        shapes, state_sharding), state_sharding
  state = jax.jit(init_fn, out_shardings=state_sharding)()
  return state, state_sharding


# ----------------------------------------------------------------------------
# The loop.


def _host(tree):
  return jax.tree.map(np.asarray, jax.device_get(tree))


def _write_json(path: str, obj: dict) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(obj, f, indent=1, default=str)
  os.replace(tmp, path)


class _Status:
  """``status.json``: written by process 0 only, atomically."""

  def __init__(self, workdir: str, enabled: bool):
    self.path = os.path.join(workdir, "status.json")
    self.enabled = enabled
    prior = {}
    if os.path.exists(self.path):
      with open(self.path, encoding="utf-8") as f:
        prior = json.load(f)
    # CPU time accumulates over resumes: compute comparisons (core-hours) see
    # the whole run.
    self.prior_core_seconds = float(prior.get("core_seconds", 0.0) or 0.0)
    self.t0 = time.process_time()
    self.data = {"status": "running", "reason": None, "step": 0,
                 "flops_per_step": prior.get("flops_per_step"),
                 "core_seconds": self.prior_core_seconds, "final": {}}

  def update(self, **kw):
    self.data.update(kw)
    self.data["core_seconds"] = (self.prior_core_seconds
                                 + time.process_time() - self.t0)
    if self.enabled:
      _write_json(self.path, self.data)


def _flops(compiled) -> float | None:
  try:
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
      cost = cost[0] if cost else {}
    f = cost.get("flops") if cost else None
    return float(f) if f is not None else None
  except Exception:  # pylint: disable=broad-except
    return None


def _eta(steps_left: int, steps_per_sec: float) -> str:
  secs = int(steps_left / max(steps_per_sec, 1e-9))
  return f"{secs // 3600}h{secs % 3600 // 60:02d}m" if secs >= 3600 else (
      f"{secs // 60}m{secs % 60:02d}s")


def _nonfinite_message(step, m, grad_names, ckpt) -> str:
  bad = [n for n, ok in zip(grad_names, np.asarray(m["grads_finite"])) if not ok]
  last = ckpt.latest_step()
  where = (f"the last good checkpoint is step {last} in {ckpt.directory} "
           f"(rerunning resumes from it)" if last is not None
           else "no checkpoint was saved before it")
  return (f"Non-finite training at step {step}: loss={float(m['loss']):.6g}, "
          f"grad_norm={float(m['grad_norm']):.6g}, "
          f"param_norm={float(m['param_norm']):.6g}, "
          f"{int(m['nonfinite_grads'])} non-finite gradient entries in "
          f"{len(bad)}/{len(grad_names)} tensors (first: {bad[:3]}); {where}. "
          f"Lower config.schedule.base_lr, set config.optimizer.grad_clip_norm, "
          f"or use a normalizer that does not diverge.")


def evaluate_split(eval_fn: Callable, cfg, params, batch_stats, mesh,
                   data_cfg=None) -> dict[str, float]:
  """Top-1 accuracy and mean loss over one pass of an eval split.

  Padding examples (``mask`` False) count for nothing, so every example is
  counted exactly once.
  """
  from softattn import data as data_lib  # pylint: disable=g-import-not-at-top
  data_cfg = cfg.data if data_cfg is None else data_cfg
  totals: dict[str, float] = {}
  it = data_lib.make_eval_iter(
      data_cfg, data_cfg.eval_split,
      global_batch_size=cfg.eval.batch_size or cfg.batch_size, mesh=mesh)
  for batch in it:
    out = _host(eval_fn(params, batch_stats, batch))
    for k, v in out.items():
      totals[k] = totals.get(k, 0.0) + float(v)
  count = max(totals.get("count", 0.0), 1.0)
  return {"accuracy": totals.get("correct", 0.0) / count,
          "loss": totals.get("loss_sum", 0.0) / count,
          "num_examples": totals.get("count", 0.0)}


def train_and_evaluate(config, workdir: str) -> dict[str, Any]:
  """Trains and evaluates ``config`` in ``workdir``; returns the final metrics.

  Resumes automatically from the latest checkpoint in ``workdir/checkpoints``.
  Raises ``ConfigError`` (before compiling anything) for a bad config and
  ``NonFiniteError`` when the loss or gradients stop being finite.
  """
  workdir = os.path.abspath(workdir)
  is_main = jax.process_index() == 0
  cfg, info = resolve_config(config)
  model = _build_model(cfg)
  os.makedirs(workdir, exist_ok=True)
  status = _Status(workdir, is_main)
  try:
    return _run(cfg, info, model, workdir, status, is_main)
  except NonFiniteError as e:
    status.update(status="failed", reason=str(e))
    raise
  except KeyboardInterrupt:
    status.update(status="failed", reason="interrupted (KeyboardInterrupt)")
    raise
  except Exception as e:
    status.update(status="failed", reason=f"{type(e).__name__}: {_one_line(e)}")
    raise


def _run(cfg, info, model, workdir, status, is_main) -> dict[str, Any]:
  from softattn import data as data_lib  # pylint: disable=g-import-not-at-top
  total = cfg.total_steps
  steps_per_epoch = max(int(info.get("num_train", 0) or 0) // cfg.batch_size, 1)
  mesh = sharding.make_mesh(cfg.mesh)
  tx, schedule = optim.make_optimizer(cfg, total, steps_per_epoch)
  if is_main:
    _write_json(os.path.join(workdir, "config.json"), json.loads(cfg.to_json_best_effort()))
  writer = metrics_lib.make_writer(workdir, is_main=is_main)
  ckpt = checkpointing.Checkpointer(
      os.path.join(workdir, "checkpoints"), every=cfg.checkpoint_every,
      keep=cfg.keep_checkpoints, asynchronous=bool(cfg.checkpoint_async))
  preempt = checkpointing.PreemptionFlag().install()
  verbose = bool(cfg.verbose) and is_main

  def say(msg):
    logging.info(msg)
    if verbose:
      print(msg, flush=True)

  try:
    start = 0
    if ckpt.latest_step() is not None:
      start = int(ckpt.latest_step())
      target, state_sharding = init_state(cfg, model, tx, info, mesh,
                                          abstract=True)
      state = ckpt.restore(target)
      say(f"Resumed from checkpoint step {start} in {ckpt.directory}")
    else:
      state, state_sharding = init_state(cfg, model, tx, info, mesh)
      if cfg.get("init_from") and cfg.init_from.get("path"):
        state, summary = init_from_lib.load_into(
            state, cfg, model, image_size=int(info["image_shape"][0]))
        state = jax.device_put(state, state_sharding)
        say(summary)
        writer.write_texts(0, {"info/init_from": summary})
      num_params = parameter_overview.count_parameters(state["params"])
      overview = parameter_overview.get_parameter_overview(
          state["params"], include_stats=False)
      logging.info("Parameters:\n%s", overview)
      writer.write_scalars(0, {"info/num_params": num_params})
      writer.write_texts(0, {"info/parameter_overview": overview})
      say(f"{cfg.model_name} {dict(cfg.model)}: {num_params:,} parameters; "
          f"mesh {dict(mesh.shape)}; {total} steps of batch {cfg.batch_size}")
    steps = make_steps(cfg, model, tx, schedule, mesh, state_sharding)
    grad_names = [optim.path_str(p) for p, _ in
                  jax.tree_util.tree_flatten_with_path(state["params"])[0]]

    train_iter = data_lib.make_train_iter(
        cfg.data, global_batch_size=cfg.batch_size, seed=int(cfg.seed),
        start_step=start, mesh=mesh)
    report = periodic_actions.ReportProgress(
        num_train_steps=total, writer=None,
        every_steps=max(int(cfg.log_every or 0), 1) if cfg.log_every else None,
        every_secs=None if cfg.log_every else 60.0)
    status.update(status="running", reason=None, step=start)

    final: dict[str, Any] = {}
    if start >= total:
      say(f"Already trained to step {start} >= total_steps {total}; evaluating.")
      final.update(_evaluate_all(cfg, steps, state, mesh, writer, start, say))
    pending = None  # (step, metrics) of the previous step, checked one step late
    train_exe = None
    step = start
    t_last, step_last = time.time(), start

    def check(pending_):
      s, m = pending_
      m = _host(m)
      if not (np.isfinite(m["loss"]) and np.isfinite(m["grad_norm"])
              and int(m["nonfinite_grads"]) == 0):
        raise NonFiniteError(_nonfinite_message(s, m, grad_names, ckpt))
      return m

    while step < total:
      batch = next(train_iter)
      is_log = bool(cfg.log_every) and ((step + 1) % cfg.log_every == 0
                                        or step + 1 == total)
      diag = None
      if is_log and cfg.diagnostics:
        diag = steps.diagnostics(state, batch)
      if train_exe is None:
        # Compile once, explicitly: the executable gives XLA's FLOP count
        # and then runs every step (calling the jit too would compile twice).
        train_exe = steps.train.lower(state, batch).compile()
        if status.data.get("flops_per_step") is None:
          status.data["flops_per_step"] = _flops(train_exe)
      state, m = train_exe(state, batch)
      step += 1
      # Check the previous step while this one runs (keeps dispatch async).
      if pending is not None:
        check(pending)
      pending = (step, m)
      report(step)
      need_sync = (is_log or ckpt.should_save(step) or step == total
                   or preempt.is_set()
                   or (cfg.eval_every and step % cfg.eval_every == 0))
      if need_sync:
        mh = check(pending)
        pending = None
        if is_log:
          now = time.time()
          sps = (step - step_last) / max(now - t_last, 1e-9)
          t_last, step_last = now, step
          scalars = {f"train/{k}": v for k, v in mh.items()
                     if k not in ("grads_finite",)}
          scalars["train/steps_per_sec"] = sps
          scalars["train/images_per_sec"] = sps * cfg.batch_size
          if diag is not None:
            scalars.update({f"train/{k}": v for k, v in _host(diag).items()})
          writer.write_scalars(step, scalars)
          final.update({f"train_{k}": float(mh[k]) for k in ("loss", "accuracy")})
          say(f"step {step}/{total}  loss {float(mh['loss']):.4f}  "
              f"acc {float(mh['accuracy']):.3f}  lr {float(mh['learning_rate']):.3g}  "
              f"grad_norm {float(mh['grad_norm']):.3g}  {sps:.2f} steps/s  "
              f"ETA {_eta(total - step, sps)}")
        if ckpt.should_save(step) or step == total or preempt.is_set():
          ckpt.save(step, state)
        if (cfg.eval_every and step % cfg.eval_every == 0) or step == total:
          final.update(_evaluate_all(cfg, steps, state, mesh, writer, step, say))
          t_last = time.time()  # steps/s measures training, not evaluation
        status.update(step=step)
        writer.flush()
        if preempt.is_set():
          say(f"SIGTERM: saved checkpoint {step}; rerun the same command to resume.")
          status.update(status="running", reason=f"preempted (SIGTERM) at step "
                        f"{step}; rerun to resume", step=step)
          ckpt.close()
          return final
    ckpt.close()
    final["step"] = step
    status.update(status="done", reason=None, step=step, final=final)
    say("final: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else
                              f"{k}={v}" for k, v in final.items()))
    return final
  finally:
    preempt.uninstall()
    writer.flush()
    writer.close()
    try:
      ckpt.close()
    except Exception:  # pylint: disable=broad-except
      pass


def _evaluate_all(cfg, steps, state, mesh, writer, step, say) -> dict[str, float]:
  res = evaluate_split(steps.eval, cfg, state["params"], state["batch_stats"],
                       mesh)
  out = {f"eval/{k}": v for k, v in res.items()}
  if "ema_params" in state:
    ema = evaluate_split(steps.eval, cfg, state["ema_params"],
                         state["batch_stats"], mesh)
    out.update({f"eval/ema_{k}": v for k, v in ema.items() if k != "num_examples"})
  if steps.eval_i1k is not None:
    i1k = evaluate_split(steps.eval_i1k, cfg, state["params"],
                         state["batch_stats"], mesh,
                         ml_collections.ConfigDict(dict(cfg.eval.i1k_data)))
    out.update({"eval/i1k_accuracy": i1k["accuracy"]})
  if cfg.fewshot.get("datasets", None) and (
      step == cfg.total_steps or (cfg.fewshot.get("every", 0)
                                  and step % cfg.fewshot.every == 0)):
    from softattn import fewshot  # pylint: disable=g-import-not-at-top
    fs = fewshot.run_fewshot(cfg.fewshot, steps.features, state["params"],
                             state["batch_stats"], mesh)
    out.update({f"eval/fewshot/{k}": v for k, v in fs.items()})
  writer.write_scalars(step, out)
  say(f"eval @ {step}: " + ", ".join(
      f"{k[5:]}={v:.4f}" for k, v in out.items() if "num_examples" not in k))
  return {k.replace("/", "_"): float(v) for k, v in out.items()}
