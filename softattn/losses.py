"""Classification losses for the training loop.

All losses take ``logits [B, K]`` and *soft* targets ``labels [B, K]`` (one-hot,
smoothed or mixed) and return the per-example loss ``[B]``; the caller averages
over the valid examples. ``get(name)`` maps the config name to the function.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable

import jax
import jax.numpy as jnp

from softattn import config_schema, normalizers
from softattn.normalizers import core as normalizers_core


def softmax_xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
  r"""Softmax cross-entropy ``-sum_k y_k log softmax(z)_k``.

  The standard ViT/ResNet classification loss.
  """
  return -jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def sigmoid_xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
  r"""Per-class sigmoid cross-entropy, summed over classes.

  ``-sum_k [y_k log sigma(z_k) + (1 - y_k) log(1 - sigma(z_k))]``: the
  multi-label loss big_vision uses for ImageNet-21k pre-training (Wortsman et
  al. 2023 keep it, with the head bias initialised to -10 so the initial loss
  is small). Summing (not averaging) over classes follows big_vision.
  """
  return -jnp.sum(labels * jax.nn.log_sigmoid(logits)
                  + (1.0 - labels) * jax.nn.log_sigmoid(-logits), axis=-1)


def normsoftmax_xent(logits: jax.Array, labels: jax.Array, *,
                     gamma: float = float("inf"), tau: float = 1.0,
                     eps: float = 1e-6) -> jax.Array:
  r"""Cross-entropy through NormSoftmax on the logits (Jiang et al. 2023, sec. 5).

  ``z' = (z - mean(z)) / (tau * min(std(z), gamma))`` then softmax
  cross-entropy on ``z'``. The paper's ImageNet ResNet runs use ``gamma`` in
  ``{1, inf}``; ``gamma=inf`` makes the loss invariant to the logit scale.
  ``std = sqrt(var + eps)`` (biased variance); ``eps`` is *inferred* (the paper
  gives none) and only keeps a constant logit row finite.
  """
  z = logits.astype(jnp.float32)
  mean = jnp.mean(z, axis=-1, keepdims=True)
  std = jnp.sqrt(jnp.var(z, axis=-1, keepdims=True) + eps)
  z = (z - mean) / (tau * jnp.minimum(std, gamma))
  return softmax_xent(z, labels)


def _is_exp(name: str) -> bool:
  try:
    return normalizers.get(name).mode == "exp"
  except ValueError:  # a factory that needs arguments (prenorm)
    return False


def _exp_normalizer(spec) -> normalizers.Normalizer:
  nz = normalizers.get(spec)
  if nz.mode != "exp":
    exp = [n for n in normalizers.names() if _is_exp(n)]
    raise ValueError(
        f"normalized_xent needs a softmax-type (exp-mode) normalizer, whose "
        f"log-weights are log_softmax(transform(z)); {nz.name!r} is "
        f"{nz.mode!r}. Set config.loss.normalizer to one of {exp}.")
  return nz


def normalized_xent(logits: jax.Array, labels: jax.Array, *,
                    normalizer: str | normalizers.Normalizer =
                    "normsoftmax(gamma=inf)") -> jax.Array:
  r"""Cross-entropy through any softmax-type normalizer of the registry.

  ``-sum_k y_k log_softmax(t(z))_k`` with ``t`` the normalizer's transform
  of the logits row (its statistics over the classes): with
  ``"normsoftmax(gamma=...)"`` this is ``normsoftmax_xent``; with
  ``"logitnorm"`` the LogitNorm loss that Jiang et al. 2023 (Table 4)
  compare against, ``softmax(z / (tau ||z||_2))``, no mean shift.
  ``tau=None`` there means ``K^-1/2`` over ``K`` classes, the temperature
  Jiang et al. found best in attention (for the loss they grid-search tau
  and do not report the value: *inferred*; set it in the spec, e.g.
  ``"logitnorm(tau=0.04)"``). The
  normalizer's attention score scale is not applied: the logits go in as
  they are. Parameters that depend on a head dim (``sqrt_d``) have no
  meaning here and raise.
  """
  nz = _exp_normalizer(normalizer)
  z = logits.astype(jnp.float32)
  stats = normalizers_core.row_stats(z, None, nz.needs)
  return softmax_xent(nz.transform(z, stats, **nz.resolve()), labels)


LOSSES: dict[str, Callable[..., jax.Array]] = {
    "softmax_xent": softmax_xent,
    "sigmoid_xent": sigmoid_xent,
    "normsoftmax_xent": normsoftmax_xent,
    "normalized_xent": normalized_xent,
}


def get(name: str, **kwargs) -> Callable[[jax.Array, jax.Array], jax.Array]:
  """The loss called ``name`` with keyword parameters bound.

  Raises:
    ValueError: unknown name (the message lists the valid ones).
  """
  if name not in LOSSES:
    raise ValueError(f"Unknown loss {name!r}; set config.loss.name to one of "
                     f"{sorted(LOSSES)}.")
  fn = LOSSES[name]
  takes = [k for k, prm in inspect.signature(fn).parameters.items()
           if prm.kind == prm.KEYWORD_ONLY]
  extra = sorted(set(kwargs) - set(takes))
  if extra:
    raise ValueError(f"loss {name!r} takes no parameter(s) {extra} (it takes "
                     f"{takes or 'none'}); remove config.loss.{extra[0]}.")
  if "normalizer" in kwargs:  # fail at config time, not inside jit
    _exp_normalizer(kwargs["normalizer"]).resolve()
  return functools.partial(fn, **kwargs) if kwargs else fn


# The config.loss fields that are parameters of a loss function (the others,
# label_smoothing and mixup/cutmix, act on the targets).
PARAMS = ("gamma", "tau", "normalizer")


def from_config(loss_config) -> Callable[[jax.Array, jax.Array], jax.Array]:
  """``get(config.loss.name, **the set PARAMS)``: the training loss."""
  kwargs = {k: loss_config[k] for k in PARAMS
            if k in loss_config and loss_config[k] is not None}
  return get(loss_config.name, **kwargs)


config_schema.register_check("loss", from_config)


def smooth_labels(onehot: jax.Array, smoothing: float) -> jax.Array:
  r"""Label smoothing (Szegedy et al. 2016): ``(1 - e) y + e / K``."""
  if not smoothing:
    return onehot
  k = onehot.shape[-1]
  return onehot * (1.0 - smoothing) + smoothing / k
