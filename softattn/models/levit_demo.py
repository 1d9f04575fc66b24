"""The periodic-softmax paper's LeViT-style demo (Wang et al. 2021).

As the authors' demo code (Wang et al. 2021, arXiv 2108.07153):

* stem: three 3x3 stride-2 convs with bias, ReLU after each,
  ``3 -> 32 -> 128 -> 512`` channels: 32x32 -> 4x4 = 16 tokens; no
  position embedding;
* ``depth`` blocks (1/2/4/8): ``x + Linear(attn(ReLU(qkv(LN(x)))))`` with one
  ``Linear(512 -> 1536)`` for q, k, v, ReLU on all three, 8 heads of 64,
  weights ``f(q.k / 8)`` (``f`` the normalizer), then ``x + MLP(LN(x))`` with
  ``512 -> 1024 -> 512`` and GELU;
* head: mean over tokens, ``Linear(512 -> num_classes)``.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import flax.linen as nn
import jax.numpy as jnp

from softattn import models
from softattn import normalizers as norms
from softattn.attention import dot_product_attention
from softattn.nn.attention import normalizer_params, observe, wants_observation


class ReLUQKVAttention(nn.Module):
  """Fused ``qkv`` Linear, ReLU on q, k, v, any normalizer, ``proj`` Linear.

  ``scale`` defaults to ``1/sqrt(head_dim)`` (the demo's ``/8``) for every
  normalizer, as the demo code (it did not drop it for any ``f``).
  """
  num_heads: int = 8
  normalizer: str = "softmax"
  scale: Optional[float] = None
  implementation: str = "auto"
  dtype: Any = None

  @nn.compact
  def __call__(self, x):
    b, n, d = x.shape
    hd = d // self.num_heads
    qkv = nn.Dense(3 * d, dtype=self.dtype, name="qkv")(x)
    qkv = nn.relu(qkv).reshape(b, n, 3, self.num_heads, hd)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    norm = norms.get(self.normalizer)
    scale = self.scale if self.scale is not None else 1.0 / math.sqrt(hd)
    p = normalizer_params(self, norm, self.num_heads)
    y = dot_product_attention(q, k, v, normalizer=norm, normalizer_params=p,
                              scale=scale, implementation=self.implementation)
    if wants_observation(self):
      observe(self, q, k, norm, p, scale)
    return nn.Dense(d, dtype=self.dtype, name="proj")(y.reshape(b, n, d))


class LeViTDemo(nn.Module):
  """``model_name='levit_demo'``: ``LeViTDemo(depth=4, num_classes=100,
  normalizer='sin2_max_shifted')``.

  Attributes:
    depth: number of blocks (paper: 1, 2, 4, 8).
    num_classes: head width (CIFAR-100: 100).
    width, num_heads, mlp_dim, stem_widths: the demo's 512 / 8 / 1024 /
      (32, 128, 512); the last stem width must equal ``width``.
    normalizer: registry spec; ``prenorm(...)`` for the "norm-*" variants.
    attention_scale: score scale (default ``1/sqrt(head_dim)``).
  """
  depth: int = 1
  num_classes: int = 100
  width: int = 512
  num_heads: int = 8
  mlp_dim: int = 1024
  stem_widths: tuple = (32, 128, 512)
  normalizer: str = "softmax"
  attention_scale: Optional[float] = None
  implementation: str = "auto"
  dtype: Any = None

  def __post_init__(self):
    # Bad fields fail when the model is built (a config error before the
    # workdir exists), not when the first step is traced.
    models.check_counts(depth=self.depth, width=self.width,
                        num_heads=self.num_heads, mlp_dim=self.mlp_dim)
    models.check_heads(self.width, self.num_heads)
    if self.stem_widths[-1] != self.width:
      raise ValueError(f"last stem width {self.stem_widths[-1]} must equal "
                       f"width {self.width}")
    super().__post_init__()

  @nn.compact
  def __call__(self, images, train: bool = False):
    del train  # no dropout / BatchNorm in the demo
    x = images
    for i, c in enumerate(self.stem_widths):
      x = nn.relu(nn.Conv(c, (3, 3), strides=(2, 2), padding=1,
                          dtype=self.dtype, name=f"stem{i}")(x))
    b, h, w, c = x.shape
    x = x.reshape(b, h * w, c)
    for i in range(self.depth):
      y = nn.LayerNorm(name=f"block{i}_ln0")(x)
      y = ReLUQKVAttention(num_heads=self.num_heads,
                           normalizer=self.normalizer,
                           scale=self.attention_scale,
                           implementation=self.implementation,
                           dtype=self.dtype, name=f"block{i}_attn")(y)
      x = x + y
      y = nn.LayerNorm(name=f"block{i}_ln1")(x)
      y = nn.Dense(self.mlp_dim, dtype=self.dtype, name=f"block{i}_mlp0")(y)
      y = nn.Dense(c, dtype=self.dtype, name=f"block{i}_mlp1")(
          nn.gelu(y, approximate=False))  # PyTorch's exact GELU, as the demo
      x = x + y
    x = jnp.mean(x, axis=1).astype(jnp.float32)
    self.sow("intermediates", "pre_logits", x)
    return nn.Dense(self.num_classes, name="head")(x)
