"""The step math of training and evaluation, as module-level pure functions.

Each function takes ``Settings`` (frozen, derived once from the config:
model, optimizer, loss, compute dtype, mixup/cutmix, label smoothing, EMA,
number of classes, seed, sharding) and the state or parameters and a batch;
none reads the config or holds hidden state, so each can be called directly
(unit tests), ``jax.jit``-ed with shardings (``softattn.train.make_steps``) or
lowered for a TPU topology ahead of time. The shape follows flax's
``examples/imagenet/train.py`` (``train_step``, ``eval_step``).

The train state is a dict: ``step`` (int32), ``params``, ``batch_stats``
(``{}`` for models without BatchNorm), ``opt_state`` and, with EMA,
``ema_params``. The randomness of step ``k`` (dropout, mixup/cutmix) is
``fold_in(key(seed), k)``: a pure function of ``(seed, k)``, so a resumed run
repeats the uninterrupted one bitwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import numpy as np
import optax

from softattn import config_schema, evaluate, losses, sharding
from softattn.data import mix

Batch = dict[str, jax.Array]
State = dict[str, Any]
# config.compute_dtype: the dtype of the forward and backward (float32 params).
COMPUTE_DTYPES = ("float32", "bfloat16")
config_schema.register_names("compute_dtype", COMPUTE_DTYPES)


@dataclasses.dataclass(frozen=True)
class Settings:
  """What the steps need from the config (``Settings.from_config``).

  ``loss`` is per example: ``loss(logits, targets) -> [batch]``. ``mesh`` and
  ``sharding_rules`` only matter under ``jax.jit`` on a mesh: the forward
  all-gathers ``data``-sharded parameters (``sharding.gather_for_compute``);
  with ``mesh=None`` nothing is constrained.
  """
  model: nn.Module
  tx: optax.GradientTransformation
  loss: Callable[[jax.Array, jax.Array], jax.Array]
  num_classes: int
  schedule: optax.Schedule = optax.constant_schedule(0.0)
  compute_dtype: Any = jnp.float32
  seed: int = 0
  mixup_alpha: float = 0.0
  cutmix_alpha: float = 0.0
  switch_prob: float = 0.5
  label_smoothing: float = 0.0
  ema_decay: float = 0.0
  mesh: Mesh | None = None
  sharding_rules: tuple[tuple[str, str], ...] = ((".*", "replicate"),)

  @classmethod
  def from_config(cls, cfg, model, tx, schedule, mesh=None) -> "Settings":
    """From a resolved config (``softattn.configlib.resolve_config``)."""
    lc = cfg.loss
    return cls(
        model=model, tx=tx, schedule=schedule,
        loss=losses.from_config(lc),
        num_classes=int(cfg.model.num_classes),
        compute_dtype=jnp.dtype(cfg.compute_dtype), seed=int(cfg.seed),
        mixup_alpha=float(lc.get("mixup_alpha", 0.0) or 0.0),
        cutmix_alpha=float(lc.get("cutmix_alpha", 0.0) or 0.0),
        switch_prob=float(lc.get("switch_prob", 0.5)),
        label_smoothing=float(lc.get("label_smoothing", 0.0) or 0.0),
        ema_decay=float(cfg.optimizer.get("ema_decay", 0.0) or 0.0),
        mesh=mesh,
        sharding_rules=tuple(tuple(r) for r in cfg.sharding_rules))


def cast_floats(tree, dtype):
  """Floating leaves of ``tree`` cast to ``dtype``; integer leaves kept."""
  return jax.tree.map(
      lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
      tree)


def step_rng(s: Settings, step) -> jax.Array:
  """The randomness of step ``step``: a pure function of ``(seed, step)``."""
  return jax.random.fold_in(jax.random.key(s.seed), step)


def images_and_targets(s: Settings, rng, batch: Batch
                       ) -> tuple[jax.Array, jax.Array]:
  """Training inputs and soft targets: one-hot, mixup/cutmix, label smoothing."""
  images = batch["image"]
  onehot = jax.nn.one_hot(batch["label"], s.num_classes, dtype=jnp.float32)
  if s.mixup_alpha or s.cutmix_alpha:
    images, onehot = mix.mixup_cutmix(
        rng, images, onehot, mixup_alpha=s.mixup_alpha,
        cutmix_alpha=s.cutmix_alpha, switch_prob=s.switch_prob)
  return images, losses.smooth_labels(onehot, s.label_smoothing)


def forward(s: Settings, params, batch_stats, images, *, train: bool,
            rng=None, mutable=()) -> tuple[jax.Array, dict]:
  """``(float32 logits, mutated collections)`` of the model in compute dtype."""
  # Cast first, then all-gather over `data` (in the compute dtype: half the
  # traffic in bf16); sharding.gather_for_compute says why.
  variables = {"params": sharding.gather_for_compute(
      cast_floats(params, s.compute_dtype), s.sharding_rules, s.mesh)}
  if batch_stats:
    variables["batch_stats"] = batch_stats
  mutable = list(mutable) + (["batch_stats"] if train and batch_stats else [])
  rngs = {"dropout": rng} if rng is not None else {}
  # The mesh as context while the model traces: layers that cannot be
  # auto-partitioned (the Pallas attention kernels) wrap themselves in
  # shard_map over it instead of running on gathered, replicated inputs.
  with (jax.sharding.use_abstract_mesh(s.mesh.abstract_mesh) if s.mesh
        else contextlib.nullcontext()):
    logits, new_vars = s.model.apply(
        variables, images.astype(s.compute_dtype), train=train, rngs=rngs,
        mutable=mutable)
  return logits.astype(jnp.float32), new_vars


def loss_fn(s: Settings, params, batch_stats, images, targets, rng
            ) -> tuple[jax.Array, tuple[jax.Array, Any]]:
  """Mean training loss; aux ``(logits, new batch_stats)``."""
  logits, new_vars = forward(s, params, batch_stats, images, train=True, rng=rng)
  loss = jnp.mean(s.loss(logits, targets))
  return loss, (logits, new_vars.get("batch_stats", batch_stats))


def train_step(s: Settings, state: State, batch: Batch
               ) -> tuple[State, dict[str, jax.Array]]:
  """One optimizer step; returns the new state and the step's metrics.

  Metrics: ``loss``, ``accuracy`` (argmax against the unmixed labels),
  ``grad_norm``, ``param_norm`` (after the update), ``learning_rate`` (the
  default group's), and per gradient leaf ``grads_finite`` plus the count
  ``nonfinite_grads``, so the loop can name the tensors that broke.
  """
  step = state["step"]
  mix_rng, drop_rng = jax.random.split(step_rng(s, step))
  images, targets = images_and_targets(s, mix_rng, batch)
  (loss, (logits, new_bs)), grads = jax.value_and_grad(
      functools.partial(loss_fn, s), has_aux=True)(
          state["params"], state["batch_stats"], images, targets, drop_rng)
  # Reduce-scattered into the parameters' sharding, not all-reduced in full:
  # the norms, finiteness checks and update below then run on shards.
  grads = sharding.constrain_like_params(grads, s.sharding_rules, s.mesh)
  updates, opt_state = s.tx.update(grads, state["opt_state"], state["params"])
  params = optax.apply_updates(state["params"], updates)
  new_state = dict(state, step=step + 1, params=params, opt_state=opt_state,
                   batch_stats=new_bs)
  if s.ema_decay:
    new_state["ema_params"] = optax.incremental_update(
        params, state["ema_params"], 1.0 - s.ema_decay)
  # One count per leaf serves both finiteness metrics: a separate
  # all(isfinite) made XLA keep a boolean copy of every gradient shard.
  nonfinite = [jnp.sum(~jnp.isfinite(g)) for g in jax.tree.leaves(grads)]
  metrics = {
      "loss": loss,
      "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["label"]),
      "grad_norm": optax.tree.norm(grads),
      "param_norm": optax.tree.norm(params),
      "learning_rate": s.schedule(step),
      "grads_finite": jnp.stack([n == 0 for n in nonfinite]),
      "nonfinite_grads": sum(nonfinite),
  }
  return new_state, metrics


def _flatten_named(tree, prefix: str) -> dict[str, jax.Array]:
  """``{"prefix/a/b": mean of leaf}``; tuples from ``sow`` lose their index."""
  sums: dict[str, list] = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    keys = jax.tree_util.keystr(path, simple=True, separator="/").split("/")
    if len(keys) > 1 and keys[-1].isdigit():  # sow's tuple index
      keys = keys[:-1]
    sums.setdefault("/".join([prefix] + keys), []).append(jnp.mean(leaf))
  # A module called twice sows twice: report the mean.
  return {k: sum(v) / len(v) for k, v in sums.items()}


def layer_norms(tree, prefix: str, depth: int = 2) -> dict[str, jax.Array]:
  """L2 norm per layer: leaves grouped by the first ``depth`` module names.

  ``Transformer/encoderblock_3/MlpBlock_0/Dense_0/kernel`` counts for
  ``Transformer/encoderblock_3``; ``head/kernel`` for ``head``.
  """
  groups: dict[str, list] = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    modules = jax.tree_util.keystr(
        path, simple=True, separator="/").split("/")[:-1] or ["_"]
    groups.setdefault("/".join(modules[:depth]), []).append(leaf)
  return {f"{prefix}/{k}": optax.tree.norm(v) for k, v in groups.items()}


def diagnostics_step(s: Settings, state: State, batch: Batch
                     ) -> dict[str, jax.Array]:
  """Attention diagnostics the model sows, per-layer gradient/param norms.

  On the step's batch before the update, without dropout or mixup, so runs
  compare on equal terms: ``diag/...`` (means of the sown
  ``diagnostics`` collection), ``grad_norm/<layer>``, ``param_norm/<layer>``.
  """
  def loss_diag(params):
    logits, new_vars = forward(s, params, state["batch_stats"], batch["image"],
                               train=False, mutable=["diagnostics"])
    onehot = jax.nn.one_hot(batch["label"], s.num_classes, dtype=jnp.float32)
    return jnp.mean(s.loss(logits, onehot)), new_vars.get("diagnostics", {})
  grads, diag = jax.grad(loss_diag, has_aux=True)(state["params"])
  grads = sharding.constrain_like_params(grads, s.sharding_rules, s.mesh)
  out = _flatten_named(diag, "diag")
  out.update(layer_norms(grads, "grad_norm"))
  out.update(layer_norms(state["params"], "param_norm"))
  return out


def eval_step(s: Settings, params, batch_stats, batch: Batch,
              class_indices: np.ndarray | None = None) -> dict[str, jax.Array]:
  """Sums over the batch's real examples: ``loss_sum``, ``correct``, ``count``.

  Padding examples (``mask`` False) count for nothing. ``class_indices``
  restricts the logits first (ImageNet-21k logits -> the 1000 i1k classes).
  """
  logits, _ = forward(s, params, batch_stats, batch["image"], train=False)
  if class_indices is not None:
    logits = evaluate.restrict_logits(logits, class_indices)
  mask = batch["mask"].astype(jnp.float32)
  onehot = jax.nn.one_hot(batch["label"], logits.shape[-1], dtype=jnp.float32)
  per_example = s.loss(logits, onehot)
  correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
  return {"loss_sum": jnp.sum(per_example * mask),
          "correct": jnp.sum(correct * mask), "count": jnp.sum(mask)}


def features_step(s: Settings, params, batch_stats, images) -> jax.Array:
  """The pre-logits features the model sows (``intermediates/pre_logits``)."""
  _, new_vars = forward(s, params, batch_stats, images, train=False,
                        mutable=["intermediates"])
  feats = jax.tree.leaves(new_vars["intermediates"].get("pre_logits", ()))
  if not feats:
    raise ValueError(f"Model {type(s.model).__name__} does not sow "
                     "intermediates/pre_logits; the few-shot probe needs it.")
  return feats[0].astype(jnp.float32)


def sinks_step(s: Settings, params, batch_stats, batch: Batch
               ) -> dict[str, jax.Array]:
  """Sink diagnostics per layer and head on a probe batch.

  The model runs on the batch's first ``diagnostics.PROBE_EXAMPLES``
  examples with the ``sinks`` collection mutable; returns
  ``diagnostics.summarize_sinks`` of what its layers sow (top key share and
  kind, its value norm, output effective rank, token norms), padding
  examples (``mask`` False) weighted 0; ``{}`` for a model that sows none.
  """
  from softattn.nn import diagnostics  # pylint: disable=g-import-not-at-top
  k = diagnostics.PROBE_EXAMPLES
  _, new_vars = forward(s, params, batch_stats, batch["image"][:k],
                        train=False, mutable=[diagnostics.SINKS])
  weight = batch["mask"][:k] if "mask" in batch else None
  return diagnostics.summarize_sinks(new_vars.get(diagnostics.SINKS, {}),
                                     weight)
