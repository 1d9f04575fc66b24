"""Evaluation passes of a run, and ImageNet-1k accuracy of an ImageNet-21k model.

``evaluate_split`` runs a jitted eval step (``softattn.steps.eval_step``)
over one eval split; ``evaluate_all`` runs every evaluator a config asks for
(eval split, EMA weights, i1k-from-i21k, few-shot probe) and writes them.

Wortsman et al. (2023) report the i1k accuracy of i21k-trained models by
taking the top class *among the 1000 i1k classes* of the 21k-way output, on
the i1k validation set (no fine-tuning). That needs, for each i1k class, its
index in the i21k label space: ``i1k_indices(i21k_wnids)`` builds this table
from the two WordNet-id lists. The i1k list ships with TFDS
(``imagenet2012/labels.txt``, in TFDS's label order); the i21k list is the
one the user's i21k dataset was built with (one wnid per line, label order;
set ``config.eval.i21k_wnids_file``). Without that file the shipped table
``softattn.data.i1k_in_i21k`` is used: big_vision's ``imagenet21k`` order (the
21,843 fall11 wnids, sorted). That release lacks one i1k class (teddy bear,
n04399382): its logit is set to -inf, so its 50 validation images always
count as errors (the conservative choice; the reported accuracy is over all
50,000 images).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from softattn import paths

# evaluate_all's keys of the sink diagnostics (metrics.jsonl / TensorBoard).
SINK_PREFIX = "eval/sink/"


def i1k_wnids() -> list[str]:
  """The 1000 ImageNet-1k WordNet ids in TFDS ``imagenet2012`` label order."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(tfds.__file__), "datasets",
                      "imagenet2012", "labels.txt")
  with open(path, encoding="utf-8") as f:
    wnids = [l.strip() for l in f if l.strip()]
  if len(wnids) != 1000:
    raise ValueError(f"{path} has {len(wnids)} labels, expected 1000.")
  return wnids


def read_wnids(path: str) -> list[str]:
  """One wnid per line (blank lines ignored), in the dataset's label order."""
  text = paths.read_text(path) if path else None  # local or gs://
  if text is None:
    raise FileNotFoundError(
        f"i21k class list {path!r} not found; set config.eval.i21k_wnids_file "
        "to the wnid-per-line file your imagenet21k labels follow.")
  return [l.strip() for l in text.splitlines() if l.strip()]


def i1k_indices(i21k_wnids: list[str]) -> np.ndarray:
  """``int32[1000]``: index in the i21k label space of each i1k class.

  Raises:
    ValueError: an i1k wnid missing from the i21k list (the message names it).
  """
  pos = {w: i for i, w in enumerate(i21k_wnids)}
  missing = [w for w in i1k_wnids() if w not in pos]
  if missing:
    raise ValueError(f"{len(missing)} i1k classes are not in the i21k list "
                     f"(first: {missing[:3]}); check config.eval.i21k_wnids_file.")
  return np.asarray([pos[w] for w in i1k_wnids()], np.int32)


def default_i1k_indices(wnids_file: str | None) -> np.ndarray:
  """The i1k -> i21k table: from ``wnids_file`` if given, else the shipped one
  (big_vision's sorted fall11 order, ``-1`` for the class it lacks)."""
  if wnids_file:
    return i1k_indices(read_wnids(wnids_file))
  from softattn.data import i1k_in_i21k  # pylint: disable=g-import-not-at-top
  return i1k_in_i21k.i1k_indices()


def restrict_logits(logits: jax.Array, indices: np.ndarray) -> jax.Array:
  """The columns of ``logits`` for ``indices`` (i21k logits -> i1k logits).

  A negative index marks an i1k class the i21k label space lacks: its column
  is -inf, so it is never predicted and its images count as errors.
  """
  indices = jnp.asarray(indices)
  cols = jnp.take(logits, jnp.maximum(indices, 0), axis=-1)
  return jnp.where(indices >= 0, cols, -jnp.inf)


def evaluate_split(eval_fn: Callable, cfg, params, batch_stats, mesh,
                   data_cfg=None, *, probe: Callable | None = None
                   ) -> dict[str, float]:
  """Top-1 accuracy and mean loss over one pass of an eval split.

  ``eval_fn(params, batch_stats, batch)`` returns the batch's sums
  (``softattn.steps.eval_step``). Padding examples (``mask`` False) count for
  nothing, so every example is counted exactly once. ``probe(batch)``, if
  given, runs on the split's first batch (the same examples at every eval:
  a fixed probe batch); its dict of scalars is added to the result.
  """
  from softattn import data as data_lib  # pylint: disable=g-import-not-at-top
  data_cfg = cfg.data if data_cfg is None else data_cfg
  totals: dict[str, float] = {}
  it = data_lib.make_eval_iter(
      data_cfg, data_cfg.eval_split,
      global_batch_size=cfg.eval.batch_size or cfg.batch_size, mesh=mesh)
  probed, first = {}, True
  for batch in it:
    if probe is not None and first:
      probed = {k: float(v) for k, v in probe(batch).items()}
    first = False
    out = jax.device_get(eval_fn(params, batch_stats, batch))
    for k, v in out.items():
      totals[k] = totals.get(k, 0.0) + float(v)
  count = max(totals.get("count", 0.0), 1.0)
  return {"accuracy": totals.get("correct", 0.0) / count,
          "loss": totals.get("loss_sum", 0.0) / count,
          "num_examples": totals.get("count", 0.0), **probed}


def sink_probe(sinks_fn: Callable | None, params, batch_stats
               ) -> Callable | None:
  """``evaluate_split``'s ``probe`` for the sink diagnostics:
  ``{"sink/<layer>/h<j>/<stat>": value}`` of ``sinks_fn(params,
  batch_stats, batch)`` (``softattn.steps.sinks_step``); None when there is
  no ``sinks_fn`` or the model sows no sink diagnostics (checked by
  tracing, nothing compiled)."""
  if sinks_fn is None:
    return None

  def probe(batch):
    if not jax.eval_shape(sinks_fn, params, batch_stats, batch):
      return {}
    out = jax.device_get(sinks_fn(params, batch_stats, batch))
    return {f"sink/{k}": v for k, v in out.items()}
  return probe


def evaluate_all(cfg, steps, state: dict[str, Any], mesh, *,
                 fewshot: bool) -> dict[str, float]:
  """``{"eval/<metric>": value}`` of every evaluator the config asks for.

  ``steps`` holds the jitted ``eval``, ``eval_i1k`` (or None) and
  ``features`` functions (``softattn.train.Steps``); ``fewshot`` says whether
  the few-shot probe is due at this step (the loop's cadence). With
  ``steps.sinks`` (``config.diagnostics``), the sink diagnostics of the
  eval split's first examples too, under ``SINK_PREFIX`` (one scalar per
  layer and head: ``softattn.nn.diagnostics.summarize_sinks``).
  """
  params, batch_stats = state["params"], state["batch_stats"]
  res = evaluate_split(steps.eval, cfg, params, batch_stats, mesh,
                       probe=sink_probe(getattr(steps, "sinks", None),
                                        params, batch_stats))
  out = {f"eval/{k}": v for k, v in res.items()}
  if "ema_params" in state:
    ema = evaluate_split(steps.eval, cfg, state["ema_params"], batch_stats, mesh)
    out.update({f"eval/ema_{k}": v for k, v in ema.items() if k != "num_examples"})
  if steps.eval_i1k is not None:
    i1k = evaluate_split(steps.eval_i1k, cfg, params, batch_stats, mesh,
                         ml_collections.ConfigDict(dict(cfg.eval.i1k_data)))
    out["eval/i1k_accuracy"] = i1k["accuracy"]
  if fewshot and cfg.fewshot.get("datasets", None):
    from softattn import fewshot as fewshot_lib  # pylint: disable=g-import-not-at-top
    fs = fewshot_lib.run_fewshot(cfg.fewshot, steps.features, params,
                                 batch_stats, mesh)
    out.update({f"eval/fewshot/{k}": v for k, v in fs.items()})
  return out
