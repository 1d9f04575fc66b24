"""Element-wise ("attention-wise") attention layer (Baco China et al. 2023).

Per head ``h`` two weight arrays ``Wx_h, Wy_h`` shaped like the input
``[H, W, C]`` (NHWC here; the paper's ``[C, H, W]``), N(0, 0.02) init:

    Ox_h = softmax over each row    (axis W) of  I (.) Wx_h
    Oy_h = softmax over each column (axis H) of  I (.) Wy_h
    head_h = I (.) BN_rel(Ox_h (.) Oy_h)            # BN_rel: optional
    out = ReLU( [BN]( Conv3x3([head_1 .. head_n]) + I ) )

The concatenated heads (``n * C`` channels) are mixed back to ``C`` channels
by a 3x3 conv with bias (padding 1) - the only reading that gives the paper's
count for model B, 33,084, exactly. The relevance BatchNorm "replaces the
1/sqrt(d_k) scaling" in the paper's words.
"""

from __future__ import annotations

from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp


class ElementWiseAttention(nn.Module):
  """One attention-wise layer on ``x [B, H, W, C]``; returns the same shape.

  Attributes:
    heads: number of heads.
    bn: BatchNorm after the skip sum (the paper's "with BatchNorm" models
      A, C, E, G).
    relevance_norm: a module applied to the stacked relevances
      ``[B, H, W, heads * C]`` before they multiply the input, or None. The
      models pass one BatchNorm *shared by all layers* (see
      ``softattn.models.elementwise``), the paper's "BN_rel".
    head_groups: None (default) concatenates all heads (conv input
      ``heads * C``). An integer averages the heads' outputs in that many
      groups first (conv input ``head_groups * C``): the only architecture we
      found whose count equals the paper's printed numbers for the 16-head
      models C, D, G, H (see ``softattn.models.elementwise``).
    skip: add the input after the conv (the paper's appendix ablates it).
    init_std: std of the attention weights and conv kernel (paper: 0.02).
    dtype: compute dtype of the conv.
  """
  heads: int = 8
  bn: bool = False
  relevance_norm: Optional[nn.Module] = None
  head_groups: Optional[int] = None
  skip: bool = True
  init_std: float = 0.02
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    _, h, w, c = x.shape
    init = nn.initializers.normal(stddev=self.init_std)
    wx = self.param("x_weights", init, (self.heads, h, w, c), jnp.float32)
    wy = self.param("y_weights", init, (self.heads, h, w, c), jnp.float32)
    # Everything up to the conv runs channels-first on 4-D [B, n*C, H, W]
    # arrays (head-major channels, as the NHWC concatenation): the row
    # softmax then reduces over the minor axis. The direct NHWC/5-D version
    # (few channels, C = 1 on Fashion-MNIST) made XLA:CPU's train step
    # ~10x slower through reductions and broadcasts over non-minor axes.
    b = x.shape[0]
    nc = self.heads * c
    to_cf = lambda t: jnp.transpose(t, (0, 3, 1, 2))       # NHWC -> NCHW
    to_cl = lambda t: jnp.transpose(t, (0, 2, 3, 1))       # NCHW -> NHWC
    xr = jnp.tile(to_cf(x.astype(jnp.float32)), (1, self.heads, 1, 1))
    w_cf = lambda t: to_cf(t).reshape(nc, h, w)            # [n,H,W,C] too
    ox = jax.nn.softmax(xr * w_cf(wx), axis=3)             # along a row
    oy = jax.nn.softmax(xr * w_cf(wy), axis=2)             # along a column
    rel = ox * oy                                          # [B,nC,H,W]
    if self.relevance_norm is not None:
      rel = to_cf(self.relevance_norm(to_cl(rel)))
    heads = xr * rel                                       # [B,nC,H,W]
    if self.head_groups:
      if self.heads % self.head_groups:
        raise ValueError(f"heads={self.heads} is not divisible by "
                         f"head_groups={self.head_groups}")
      heads = heads.reshape(b, self.head_groups,
                            self.heads // self.head_groups, c, h, w).mean(2)
      heads = heads.reshape(b, self.head_groups * c, h, w)
    y = to_cl(heads).astype(x.dtype)
    y = nn.Conv(c, (3, 3), padding=1, kernel_init=init, dtype=self.dtype,
                name="conv")(y)
    if self.skip:
      y = y + x
    if self.bn:
      y = nn.BatchNorm(use_running_average=not train, momentum=0.9,
                       epsilon=1e-5, name="bn")(y)
    return nn.relu(y)
