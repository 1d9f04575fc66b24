"""Optimizers and learning-rate schedules from a config, built with optax.

``make_schedule(cfg, total_steps, steps_per_epoch)`` turns ``config.schedule``
into an optax schedule; ``make_optimizer(config, params, ...)`` turns
``config.optimizer`` into one ``optax.GradientTransformation``:

  clip_by_global_norm (optional) -> multi_transform over parameter groups,
  each group an adam/adamw/sgd with its own schedule and weight decay.

Parameter groups (``config.optimizer.groups``) are a list of dicts with a
``pattern`` (regex, ``re.search`` on the ``/``-joined parameter path) and any
optimizer/schedule fields to override, e.g. the element-wise attention paper's
appendix: ``dict(pattern="attn", name="sgd", base_lr=0.1)``. The first matching
group wins; everything else is the ``default`` group.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax

from softattn import config_schema

OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("constant", "warmup_cosine", "step", "warmup_linear")
config_schema.register_names("optimizer.name", OPTIMIZERS)
config_schema.register_names("schedule.name", SCHEDULES)
# A group's overrides that belong to its schedule (the rest to its optimizer).
_SCHEDULE_KEYS = frozenset(config_schema.default_config().schedule.keys()) - {
    "name"}


def _get(cfg, key, default=None):
  return cfg.get(key, default) if cfg is not None else default


def make_schedule(cfg: Any, total_steps: int,
                  steps_per_epoch: int | None = None) -> optax.Schedule:
  """An optax schedule from ``config.schedule``.

  Fields: ``name`` (one of ``SCHEDULES``), ``base_lr``, ``warmup_steps`` (or
  ``warmup_epochs``), ``init_lr`` (start of the linear warmup, default 0; the
  NormSoftmax ViT recipe warms up from 2e-4), ``end_lr`` (cosine/linear end,
  default 0), ``boundaries`` (step decay, in steps; or ``boundary_epochs``) and
  ``decay_factor`` (default 0.1: ``/10`` at each boundary, the scaled non-local
  recipe).
  """
  name = _get(cfg, "name", "constant")
  if name not in SCHEDULES:
    raise ValueError(f"Unknown schedule {name!r}; set config.schedule.name to "
                     f"one of {list(SCHEDULES)}.")
  base = float(_get(cfg, "base_lr", 1e-3))
  warmup = _get(cfg, "warmup_steps", None)
  if warmup is None and _get(cfg, "warmup_epochs", None) is not None:
    warmup = round(float(cfg.warmup_epochs) * (steps_per_epoch or 0))
  warmup = int(min(warmup or 0, total_steps))
  init = float(_get(cfg, "init_lr", 0.0))
  end = float(_get(cfg, "end_lr", 0.0))
  if name == "constant":
    main = optax.constant_schedule(base)
  elif name == "warmup_cosine":
    main = optax.cosine_decay_schedule(base, max(total_steps - warmup, 1),
                                       alpha=end / base if base else 0.0)
  elif name == "warmup_linear":
    main = optax.linear_schedule(base, end, max(total_steps - warmup, 1))
  else:  # step
    bounds = _get(cfg, "boundaries", None)
    if bounds is None and _get(cfg, "boundary_epochs", None) is not None:
      bounds = [round(float(e) * (steps_per_epoch or 0))
                for e in cfg.boundary_epochs]
    factor = float(_get(cfg, "decay_factor", 0.1))
    main = optax.piecewise_constant_schedule(
        base, {int(b) - warmup: factor for b in (bounds or ()) if b > warmup})
  if not warmup:
    return main
  return optax.join_schedules(
      [optax.linear_schedule(init, base, warmup), main], [warmup])


def _base_transform(cfg, schedule) -> optax.GradientTransformation:
  name = _get(cfg, "name", "adamw")
  wd = float(_get(cfg, "weight_decay", 0.0) or 0.0)
  mu_dtype = _get(cfg, "mu_dtype", None)
  mu_dtype = jnp.dtype(mu_dtype) if mu_dtype else None
  decay_mask = _decay_mask(int(_get(cfg, "decay_min_ndim", 2)))
  if name == "adamw":
    # Decoupled decay scaled by the lr (optax/Loshchilov & Hutter).
    return optax.adamw(schedule, b1=_get(cfg, "b1", 0.9), b2=_get(cfg, "b2", 0.999),
                       eps=_get(cfg, "eps", 1e-8), mu_dtype=mu_dtype,
                       weight_decay=wd, mask=decay_mask)
  if name == "adam":
    # Coupled L2 (added to the gradient before Adam), as torch's Adam(wd=...)
    # which the periodic-normalizer demo used.
    return optax.chain(
        optax.add_decayed_weights(wd, mask=decay_mask) if wd else optax.identity(),
        optax.adam(schedule, b1=_get(cfg, "b1", 0.9), b2=_get(cfg, "b2", 0.999),
                   eps=_get(cfg, "eps", 1e-8), mu_dtype=mu_dtype))
  if name == "sgd":
    # Coupled L2 as in the ResNet recipes (wd 1e-4 with momentum 0.9).
    momentum = _get(cfg, "momentum", 0.9)
    return optax.chain(
        optax.add_decayed_weights(wd, mask=decay_mask) if wd else optax.identity(),
        optax.sgd(schedule, momentum=momentum or None,
                  nesterov=bool(_get(cfg, "nesterov", False))))
  raise ValueError(f"Unknown optimizer {name!r}; set config.optimizer.name to "
                   f"one of {list(OPTIMIZERS)}.")


def _decay_mask(min_ndim: int) -> Callable[[Any], Any]:
  # Decay matrices/kernels only, not biases or norm scales (standard practice;
  # the threshold is configurable as optimizer.decay_min_ndim).
  return lambda params: jax.tree.map(lambda p: p.ndim >= min_ndim, params)


def _merged(base, override: dict) -> ml_collections.ConfigDict:
  d = ml_collections.ConfigDict(base.to_dict() if base is not None else {})
  with d.unlocked():
    for k, v in override.items():
      d[k] = v
  return d


def param_labels(params, groups) -> Any:
  """The group label (``"group<i>"`` or ``"default"``) of every parameter."""
  pats = [re.compile(g["pattern"]) for g in groups]

  def label(path, _):
    s = jax.tree_util.keystr(path, simple=True, separator="/")
    for i, p in enumerate(pats):
      if p.search(s):
        return f"group{i}"
    return "default"
  return jax.tree_util.tree_map_with_path(label, params)


def make_optimizer(config, total_steps: int, steps_per_epoch: int | None = None
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """``(tx, schedule)`` from ``config.optimizer`` and ``config.schedule``.

  ``config.optimizer`` fields: ``name`` (``adamw``/``adam``/``sgd``), ``b1``,
  ``b2``, ``eps``, ``mu_dtype`` (e.g. ``"bfloat16"``: the ReLU-attention
  recipe's bf16 first moment), ``weight_decay``, ``decay_min_ndim``,
  ``momentum``, ``nesterov``, ``grad_clip_norm`` (global-norm clipping, 0/None
  = off), ``groups`` (see the module docstring). The returned schedule is the
  default group's, for logging.
  """
  ocfg, scfg = config.optimizer, config.schedule
  schedule = make_schedule(scfg, total_steps, steps_per_epoch)
  groups = [dict(g) for g in (_get(ocfg, "groups", None) or ())]
  for g in groups:
    if "pattern" not in g:
      raise ValueError("Every config.optimizer.groups entry needs a 'pattern' "
                       "(regex on the parameter path), e.g. dict(pattern='attn', base_lr=0.1).")
  if not groups:
    tx = _base_transform(ocfg, schedule)
  else:
    txs = {"default": _base_transform(ocfg, schedule)}
    for i, g in enumerate(groups):
      over = {k: v for k, v in g.items() if k != "pattern"}
      s_over = {k: v for k, v in over.items() if k in _SCHEDULE_KEYS}
      if "schedule" in over:  # a group may switch schedule: schedule="constant"
        s_over["name"] = over["schedule"]
      o_over = {k: v for k, v in over.items()
                if k not in _SCHEDULE_KEYS and k != "schedule"}
      g_sched = make_schedule(_merged(scfg, s_over), total_steps, steps_per_epoch)
      txs[f"group{i}"] = _base_transform(_merged(ocfg, o_over), g_sched)
    tx = optax.multi_transform(txs, lambda p: param_labels(p, groups))
  clip = _get(ocfg, "grad_clip_norm", None)
  if clip:
    tx = optax.chain(optax.clip_by_global_norm(float(clip)), tx)
  return tx, schedule
