r"""Mixup and CutMix on a batch, pure JAX (jit- and sharding-friendly).

Mixup (Zhang et al., 2018, "mixup: Beyond empirical risk minimization"):
:math:`\tilde x = \lambda x_i + (1-\lambda) x_j`,
:math:`\tilde y = \lambda y_i + (1-\lambda) y_j`, :math:`\lambda \sim
\mathrm{Beta}(\alpha, \alpha)`.

CutMix (Yun et al., 2019, "CutMix: Regularization strategy to train strong
classifiers with localizable features"): paste a box of relative area
:math:`1-\lambda` from :math:`x_j` into :math:`x_i`; the label weight is the
area actually kept after clipping the box to the image.

One :math:`\lambda` per batch and the partner :math:`j` of example :math:`i` is
the batch reversed (:math:`j = B-1-i`), as in timm's default ``batch`` mode;
drawing per example would cost more and is not what the usual recipes use.
When both alphas are positive, CutMix is chosen with probability
``switch_prob`` (per batch).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _cutmix_box(rng, lam, height, width):
  """Box mask ``[H, W]`` (True inside) of area about ``1 - lam``; kept area."""
  rng_y, rng_x = jax.random.split(rng)
  cut = jnp.sqrt(1.0 - lam)
  cut_h, cut_w = cut * height, cut * width
  cy = jax.random.uniform(rng_y, (), minval=0.0, maxval=height)
  cx = jax.random.uniform(rng_x, (), minval=0.0, maxval=width)
  y0 = jnp.clip(jnp.round(cy - cut_h / 2), 0, height)
  y1 = jnp.clip(jnp.round(cy + cut_h / 2), 0, height)
  x0 = jnp.clip(jnp.round(cx - cut_w / 2), 0, width)
  x1 = jnp.clip(jnp.round(cx + cut_w / 2), 0, width)
  rows = jnp.arange(height)[:, None]
  cols = jnp.arange(width)[None, :]
  box = (rows >= y0) & (rows < y1) & (cols >= x0) & (cols < x1)
  kept = 1.0 - (y1 - y0) * (x1 - x0) / (height * width)
  return box, kept


def mixup_cutmix(rng, images, onehot_labels, *, mixup_alpha: float,
                 cutmix_alpha: float, switch_prob: float = 0.5):
  """Mixes a batch with Mixup or CutMix.

  Args:
    rng: a ``jax.random`` key.
    images: float ``[B, H, W, C]``.
    onehot_labels: float ``[B, K]`` (one-hot, possibly label-smoothed).
    mixup_alpha: Beta parameter of Mixup; 0 disables Mixup.
    cutmix_alpha: Beta parameter of CutMix; 0 disables CutMix.
    switch_prob: probability of CutMix when both are enabled.

  Returns:
    ``(images, labels)`` with the input shapes and dtypes; unchanged (the same
    arrays) when both alphas are 0.
  """
  if mixup_alpha < 0 or cutmix_alpha < 0:
    raise ValueError(f"mixup_alpha and cutmix_alpha must be >= 0, got "
                     f"{mixup_alpha} and {cutmix_alpha}")
  if not 0.0 <= switch_prob <= 1.0:
    raise ValueError(f"switch_prob must be in [0, 1], got {switch_prob}")
  if mixup_alpha == 0 and cutmix_alpha == 0:
    return images, onehot_labels
  if images.ndim != 4:
    raise ValueError(f"images must be [B, H, W, C], got shape {images.shape}")

  rng_switch, rng_mix, rng_cut, rng_box = jax.random.split(rng, 4)
  height, width = images.shape[1], images.shape[2]
  partner_images = images[::-1]
  partner_labels = onehot_labels[::-1]

  def mixup():
    lam = jax.random.beta(rng_mix, mixup_alpha, mixup_alpha)
    mixed = lam * images + (1.0 - lam) * partner_images
    return mixed.astype(images.dtype), lam

  def cutmix():
    lam = jax.random.beta(rng_cut, cutmix_alpha, cutmix_alpha)
    box, kept = _cutmix_box(rng_box, lam, height, width)
    mixed = jnp.where(box[None, :, :, None], partner_images, images)
    return mixed, kept

  if cutmix_alpha == 0:
    mixed, lam = mixup()
  elif mixup_alpha == 0:
    mixed, lam = cutmix()
  else:
    use_cutmix = jax.random.uniform(rng_switch) < switch_prob
    (m_img, m_lam), (c_img, c_lam) = mixup(), cutmix()
    mixed = jnp.where(use_cutmix, c_img, m_img)
    lam = jnp.where(use_cutmix, c_lam, m_lam)
  lam = lam.astype(onehot_labels.dtype)
  labels = lam * onehot_labels + (1.0 - lam) * partner_labels
  return mixed, labels
