"""Start a run from another run's weights: fine-tuning, inserted blocks.

``config.init_from.path`` names where the weights come from:

* a softattn run's workdir (or its ``checkpoints`` directory): the Orbax
  checkpoint at ``init_from.step`` (default: the latest). Its ``params`` and
  ``batch_stats`` are taken; the optimizer state, step and EMA start fresh.
  A ViT trained at another resolution has its learned position embedding
  resampled to this run's patch grid (bilinear; ``configs/transfer.py``).
* a big_vision ViT ``.npz`` (``softattn.models.big_vision_io``), for ViT
  models; the position embedding is resampled to the run's image size.

Every parameter of the new model is either loaded (same path, same shape) or
kept at its fresh initialisation because

* its path matches the regex ``init_from.skip`` (e.g. ``head/.*`` to re-learn
  the classifier for a new label set), or
* the checkpoint does not have it: blocks inserted into a pretrained network,
  as the scaled non-local paper's Tiny-ImageNet fine-tuning inserts NL blocks
  into a pretrained PreResNet-50 (Cho et al. 2022, Sec. 5).

Anything else is an error before training starts: a shape mismatch, or a
checkpoint weight the model has no place for (unless ``skip`` matches it),
or nothing loaded at all. The loaded / fresh split is logged and written to
the run's metrics as ``info/init_from``. A run that has checkpoints of its own
resumes from them and ignores ``init_from``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from softattn import paths


class InitFromError(ValueError):
  """The checkpoint does not fit the model; the message says how to fix it."""


def _flat(tree) -> dict[str, Any]:
  return {jax.tree_util.keystr(p, simple=True, separator="/"): x
          for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _checkpoint_dir(path: str) -> str:
  sub = paths.join(path, "checkpoints")  # local or gs://
  return str(paths.path(sub if paths.isdir(sub) else path))  # Orbax: absolute


def read_orbax(path: str, step: int | None = None) -> dict[str, Any]:
  """``{"params": ..., "batch_stats": ...}`` of a softattn run's checkpoint."""
  directory = _checkpoint_dir(path)
  if not paths.isdir(directory):
    raise InitFromError(f"init_from.path={path!r} does not exist; give a run's "
                        "workdir, its checkpoints directory or a .npz file.")
  manager = ocp.CheckpointManager(directory)
  try:
    steps = list(manager.all_steps())
    if not steps:
      raise InitFromError(f"init_from.path={path!r} holds no checkpoint; give "
                          "a run's workdir, its checkpoints directory or a "
                          ".npz file.")
    step = max(steps) if step is None else int(step)
    if step not in steps:
      raise InitFromError(f"init_from.step={step} is not in {directory}; "
                          f"it has steps {sorted(steps)}.")
    state = manager.restore(step, args=ocp.args.StandardRestore())
  finally:
    manager.close()
  return {"params": state["params"],
          "batch_stats": state.get("batch_stats") or {}}


def merge(fresh: Mapping, loaded: Mapping, skip: str = "",
          what: str = "params") -> tuple[dict, dict[str, list[str]]]:
  """``fresh`` with every leaf that ``loaded`` has at the same path replaced.

  Args:
    fresh: the new model's freshly initialised tree.
    loaded: the checkpoint's tree (any array type).
    skip: regex (``re.fullmatch`` on ``"a/b/kernel"`` paths); matching leaves
      keep their fresh value, and matching checkpoint leaves may go unused.
    what: the tree's name, for messages.

  Returns:
    ``(merged, report)``: ``merged`` has ``fresh``'s structure and dtypes;
    ``report`` lists the paths ``loaded``, ``fresh`` (absent from the
    checkpoint), ``skipped`` and ``unused`` (checkpoint leaves matched by
    ``skip`` that the model has no place for).
  """
  pattern = re.compile(skip) if skip else None
  skipped_ = lambda k: bool(pattern and pattern.fullmatch(k))
  src = _flat(loaded)
  report = {"loaded": [], "fresh": [], "skipped": [], "unused": []}
  wrong, model_keys = [], set()

  def pick(path, leaf):
    k = jax.tree_util.keystr(path, simple=True, separator="/")
    model_keys.add(k)
    if skipped_(k):
      report["skipped"].append(k)
      return leaf
    if k not in src:
      report["fresh"].append(k)
      return leaf
    value = src[k]
    if tuple(np.shape(value)) != tuple(leaf.shape):
      wrong.append(f"{k}: checkpoint {tuple(np.shape(value))} vs model "
                   f"{tuple(leaf.shape)}")
      return leaf
    report["loaded"].append(k)
    return jnp.asarray(value, leaf.dtype)

  merged = jax.tree_util.tree_map_with_path(pick, dict(fresh))
  extra = [k for k in src if k not in model_keys]
  report["unused"] = [k for k in extra if skipped_(k)]
  unexpected = [k for k in extra if not skipped_(k)]
  if wrong or unexpected:
    problems = ([f"shape mismatch {', '.join(wrong[:4])}"] if wrong else []) + (
        [f"weights the model has no place for {unexpected[:4]}"]
        if unexpected else [])
    raise InitFromError(
        f"init_from: the checkpoint's {what} do not fit the model: "
        f"{'; '.join(problems)}"
        f"{' ...' if len(wrong) > 4 or len(unexpected) > 4 else ''}. Check "
        "the model config, or add a regex matching them to init_from.skip "
        "to keep their fresh init (e.g. skip='head/.*').")
  return merged, report


def load_into(state: dict, cfg, model, image_size: int) -> tuple[dict, str]:
  """``state`` with ``params`` (and EMA) / ``batch_stats`` from ``cfg.init_from``.

  Returns the new state (same structure, host arrays to be placed by the
  caller) and a one-line summary for the log.
  """
  spec = cfg.init_from
  path = str(spec.path)
  skip = spec.get("skip") or ""
  if path.endswith(".npz"):
    if type(model).__name__ != "ViT":
      raise InitFromError(f"init_from.path={path!r} is a big_vision .npz, "
                          f"which only loads into model_name='vit', not "
                          f"{cfg.model_name!r}.")
    from softattn.models import big_vision_io  # pylint: disable=g-import-not-at-top
    params = big_vision_io.load_big_vision_npz(
        path, model, image_size=image_size,
        params=jax.device_get(state["params"]),
        dont_load=[skip] if skip else ())
    loaded = {"params": params, "batch_stats": {}}
  else:
    loaded = read_orbax(path, spec.get("step"))
  loaded, resampled = _fit_posemb(loaded, state["params"], model, image_size)
  params, report = merge(state["params"], loaded["params"], skip, "params")
  if not report["loaded"]:
    raise InitFromError(f"init_from: no parameter of {path!r} fits the model "
                        "(no shared path); is it the right checkpoint?")
  stats, _ = merge(state["batch_stats"], loaded["batch_stats"], skip,
                   "batch_stats")
  out = {**state, "params": params, "batch_stats": stats}
  if "ema_params" in state:
    out["ema_params"] = jax.tree.map(jnp.copy, params)
  fresh = report["fresh"] + report["skipped"]
  summary = (f"init_from {path}: {len(report['loaded'])} weights loaded, "
             f"{len(fresh)} fresh ({', '.join(fresh[:6])}"
             f"{' ...' if len(fresh) > 6 else ''}){resampled}")
  return out, summary


def _fit_posemb(loaded: dict, fresh: Mapping, model, image_size: int
                ) -> tuple[dict, str]:
  """``loaded`` with a ViT's learned ``pos_embedding`` from a run at another
  resolution resampled to the model's patch grid
  (``softattn.models.vit.resample_posemb``: bilinear, the checkpoint's grid
  taken to have the model's aspect ratio), and a note for the summary
  (``""`` when nothing was resampled). A sin-cos embedding has no
  parameter: the ViT computes it for whatever grid it sees."""
  old = loaded["params"].get("pos_embedding")
  new = fresh.get("pos_embedding")
  if (type(model).__name__ != "ViT" or old is None or new is None
      or np.shape(old) == np.shape(new) or np.shape(old)[-1] != new.shape[-1]):
    return loaded, ""  # nothing to do, or a mismatch merge reports
  from softattn.models import vit  # pylint: disable=g-import-not-at-top
  prefix = int(model.pool == "tok" and model.posemb_with_cls)
  ph = model._arch()["patch_size"][0]  # pylint: disable=protected-access
  rows = new.shape[1] - prefix
  gh = max(int(image_size) // ph, 1)
  new_grid = (gh, rows // gh)
  try:
    old_grid = vit.infer_grid(np.shape(old)[1] - prefix, new_grid)
  except ValueError as e:
    raise InitFromError(f"init_from: the checkpoint's pos_embedding "
                        f"{tuple(np.shape(old))} cannot be resampled to the "
                        f"model's {tuple(new.shape)}: {e}") from None
  pe = vit.resample_posemb(np.asarray(old), new_grid, old_grid,
                           num_prefix=prefix)
  params = {**loaded["params"], "pos_embedding": pe}
  note = (f"; pos_embedding resampled {old_grid[0]}x{old_grid[1]} -> "
          f"{new_grid[0]}x{new_grid[1]}")
  return {**loaded, "params": params}, note
