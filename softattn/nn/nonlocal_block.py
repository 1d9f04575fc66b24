"""Non-local blocks for 2-D feature maps: softmax NL and scaled NL.

Wang et al. 2018 (embedded Gaussian): ``y_i = sum_j softmax_j(theta_i . phi_j
/ sqrt(c)) g_j``, ``z = BN(W_z y) + x``. Cho et al. 2022 (scaled NL, eq. 3)
drop the softmax: ``y = theta (phi^T g) / sqrt(HW c)``, computed right to left
in O(HW c^2) per head - here ``normalizer="scaled"``, which
``dot_product_attention`` runs on its linear path. Any other registry
normalizer works too (dense or chunked path).
"""

from __future__ import annotations

from typing import Any, Optional

import flax.linen as nn
import jax.numpy as jnp

from softattn import normalizers as norms
from softattn.attention import dot_product_attention
from softattn.nn.attention import normalizer_params, observe, wants_observation

MODES = ("base", "magnitude", "direction")
INITS = ("he", "normal", "zeros")


def embedding_init(kind: str, std: float = 0.01):
  """``he`` (Kaiming normal, fan-in, ReLU gain), ``normal`` (N(0, std^2),
  the authors' 0.01) or ``zeros`` - the three columns of Cho et al. Table 2."""
  if kind == "he":
    return nn.initializers.variance_scaling(2.0, "fan_in", "normal")
  if kind == "normal":
    return nn.initializers.normal(stddev=std)
  if kind == "zeros":
    return nn.initializers.zeros
  raise ValueError(f"unknown init {kind!r}; valid: {', '.join(INITS)}")


def sinusoidal_2d(h: int, w: int, channels: int, temperature=10_000.0):
  """2-D sinusoidal position encoding ``[h, w, channels]``.

  Half the channels encode the row, half the column, each as interleaved
  ``sin/cos(pos * temperature^(-2k/half))`` (Vaswani et al.'s 1-D encoding per
  axis). Channels must be divisible by 4.
  """
  if channels % 4:
    raise ValueError(f"2-D position encoding needs channels divisible by 4, "
                     f"got {channels}")
  half = channels // 2
  freq = temperature ** (-jnp.arange(0, half, 2) / half)       # [half/2]

  def axis(n):
    a = jnp.arange(n)[:, None] * freq[None]
    return jnp.stack([jnp.sin(a), jnp.cos(a)], -1).reshape(n, half)

  ys = jnp.broadcast_to(axis(h)[:, None], (h, w, half))
  xs = jnp.broadcast_to(axis(w)[None], (h, w, half))
  return jnp.concatenate([ys, xs], -1)


class NonLocalBlock2D(nn.Module):
  """Multi-head non-local block on ``x [B, H, W, C]``, returns the same shape.

  ``theta, phi, g`` are 1x1 convs to ``embed_channels`` (default ``C``, i.e.
  ``C / heads`` per head as Cho et al. following Vaswani et al.); the heads'
  outputs are concatenated, ``W_z`` (1x1 conv, no bias) maps back to ``C``,
  then BatchNorm with ``gamma = beta = 0`` (so the block starts as the
  identity) and the residual ``+ x``.

  Attributes:
    heads: number of heads.
    embed_channels: total embedding channels over all heads (default ``C``).
    normalizer: ``"softmax"`` (NL block) or ``"scaled"`` (scaled NL block), or
      any registry spec.
    mode: ``base``; ``magnitude`` (theta, phi replaced by their per-head norms
      ``||theta||``, eq. 4) or ``direction`` (unit vectors, eq. 5). The score
      scale stays ``1/sqrt(c)`` of the per-head embedding width in all modes
      (*inferred*; pass ``scale`` to change it).
    embed_init: init of theta, phi, g: ``he | normal | zeros`` (``init_std``
      for ``normal``; Table 2). (Not ``init``: that is ``Module.init``.)
    wz_init: init of ``W_z`` (authors' code: ``normal`` 0.01).
    use_bias: biases on theta, phi, g (*inferred*: 1x1 convs with bias as in
      Wang et al.'s code).
    posenc: add a 2-D sinusoidal position encoding to the block input before
      the theta/phi/g embeddings (authors' code); the residual uses the
      input without it (*inferred*).
    subsample: ``s > 1`` max-pools phi and g by ``s x s`` (Wang et al.'s
      sub-sampling trick); 1 (default, as Cho et al.) keeps every key.
    implementation: passed to ``dot_product_attention`` (``auto`` picks the
      linear path for ``scaled``).
    scale: score scale (default ``1/sqrt(c)``, c per-head channels).
    bn_momentum, bn_epsilon: the BatchNorm after ``W_z``.
    dtype: conv compute dtype.
  """
  heads: int = 1
  embed_channels: Optional[int] = None
  normalizer: str = "softmax"
  mode: str = "base"
  embed_init: str = "normal"
  init_std: float = 0.01
  wz_init: str = "normal"
  use_bias: bool = True
  posenc: bool = False
  subsample: int = 1
  implementation: str = "auto"
  scale: Optional[float] = None
  learnable_init: Optional[dict] = None
  bn_momentum: float = 0.9
  bn_epsilon: float = 1e-5
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    if self.mode not in MODES:
      raise ValueError(f"unknown mode {self.mode!r}; valid: {', '.join(MODES)}")
    b, h, w, c = x.shape
    e = self.embed_channels or c
    if e % self.heads:
      raise ValueError(f"embed_channels={e} is not divisible by heads="
                       f"{self.heads}; pick heads dividing the channels")
    d = e // self.heads
    norm = norms.get(self.normalizer)
    inp = x
    if self.posenc:
      inp = x + sinusoidal_2d(h, w, c).astype(x.dtype)[None]
    conv = lambda name, init: nn.Conv(
        e, (1, 1), use_bias=self.use_bias, kernel_init=init, dtype=self.dtype,
        name=name)
    einit = embedding_init(self.embed_init, self.init_std)
    theta = conv("theta", einit)(inp)
    phi = conv("phi", einit)(inp)
    g = conv("g", einit)(inp)
    if self.subsample > 1:
      pool = (self.subsample, self.subsample)
      phi = nn.max_pool(phi, pool, strides=pool)
      g = nn.max_pool(g, pool, strides=pool)
    q = theta.reshape(b, h * w, self.heads, d)
    k = phi.reshape(b, -1, self.heads, d)
    v = g.reshape(b, -1, self.heads, d)
    q, k = _mode(q, self.mode), _mode(k, self.mode)
    scale = self.scale if self.scale is not None else 1.0 / d ** 0.5
    p = normalizer_params(self, norm, self.heads, self.learnable_init)
    y = dot_product_attention(q, k, v, normalizer=norm, normalizer_params=p,
                              scale=scale, implementation=self.implementation)
    if wants_observation(self):
      observe(self, q, k, norm, p, scale)
    y = y.reshape(b, h, w, e)
    z = nn.Conv(c, (1, 1), use_bias=False, dtype=self.dtype,
                kernel_init=embedding_init(self.wz_init, self.init_std),
                name="W_z")(y)
    z = nn.BatchNorm(use_running_average=not train, momentum=self.bn_momentum,
                     epsilon=self.bn_epsilon, scale_init=nn.initializers.zeros,
                     bias_init=nn.initializers.zeros, name="bn")(z)
    return x + z.astype(x.dtype)


def _mode(t, mode):
  """Cho et al. eq. 4/5 on ``[B, L, heads, d]`` embeddings."""
  if mode == "base":
    return t
  n = jnp.sqrt(jnp.sum(jnp.square(t.astype(jnp.float32)), -1, keepdims=True)
               + 1e-12)
  if mode == "magnitude":
    return n.astype(t.dtype)
  return (t / n).astype(t.dtype)
