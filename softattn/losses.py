"""Classification losses for the training loop.

All losses take ``logits [B, K]`` and *soft* targets ``labels [B, K]`` (one-hot,
smoothed or mixed) and return the per-example loss ``[B]``; the caller averages
over the valid examples. ``get(name)`` maps the config name to the function.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp


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


LOSSES: dict[str, Callable[..., jax.Array]] = {
    "softmax_xent": softmax_xent,
    "sigmoid_xent": sigmoid_xent,
    "normsoftmax_xent": normsoftmax_xent,
}


def get(name: str, **kwargs) -> Callable[[jax.Array, jax.Array], jax.Array]:
  """The loss called ``name`` with keyword parameters bound.

  Raises:
    ValueError: unknown name (the message lists the valid ones).
  """
  if name not in LOSSES:
    raise ValueError(f"Unknown loss {name!r}; set config.loss.name to one of "
                     f"{sorted(LOSSES)}.")
  return functools.partial(LOSSES[name], **kwargs) if kwargs else LOSSES[name]


def smooth_labels(onehot: jax.Array, smoothing: float) -> jax.Array:
  r"""Label smoothing (Szegedy et al. 2016): ``(1 - e) y + e / K``."""
  if not smoothing:
    return onehot
  k = onehot.shape[-1]
  return onehot * (1.0 - smoothing) + smoothing / k
