"""Attention-wise models A-H and the VGG-like control (Baco China et al. 2023).

Parameter counts (Fashion-MNIST 28x28x1, 10 classes), paper section 2.2:

=====  =====  ======  ===  ========  ===========================================
model  heads  layers  BN   paper     ours (how)
=====  =====  ======  ===  ========  ===========================================
A      8      2       yes  33,104    33,104
B      8      2       no   33,084    33,084 (exact by construction)
C      16     2       yes  58,208    58,208 (head_groups=8)
D      16     2       no   58,172    58,172 (head_groups=8)
E      8      4       yes  58,342    58,342
F      8      4       no   58,318    58,318
G      16     4       yes  108,534   108,534 (head_groups=8)
H      16     4       no   108,494   108,494 (head_groups=8)
=====  =====  ======  ===  ========  ===========================================

Per layer: ``2 * heads * H*W*C`` attention weights + a 3x3 conv with bias to
``C`` channels; head: ``Dense(H*W*C -> 10)`` with bias. Two details are
*inferred* from the printed counts (the text does not state them):

1. The BN models exceed their no-BN twins by ``2*layers*C + 2*heads*C``
   (A-B = 20, C-D = 36, E-F = 24, G-H = 40). ``2*layers*C`` is the BN after
   each layer's skip sum; ``2*heads*C`` is the relevance BatchNorm (one
   ``C``-channel BN per head) counted *once*: we build a single relevance
   BatchNorm and share it across layers (``shared_relevance_bn=True``;
   ``False`` gives one per layer). The no-BN models have no relevance BN.
2. The 16-head counts (C, D, G, H) are exactly ``8 * 9 * C`` per layer
   below a conv on all ``16 * C`` concatenated head channels, i.e. the
   paper's mixing conv sees 8 channels. We reproduce that with
   ``head_groups=8`` (the 16 heads' outputs averaged in pairs before the
   conv) for the presets; pass ``head_groups=None`` for plain concatenation
   (then C/D/G/H have 144/144/288/288 more parameters).
"""

from __future__ import annotations

from typing import Any, Optional

import flax.linen as nn
import jax.numpy as jnp

from softattn.nn.elementwise import ElementWiseAttention

# (heads, layers, bn, head_groups)
PRESETS = {
    "A": (8, 2, True, None), "B": (8, 2, False, None),
    "C": (16, 2, True, 8), "D": (16, 2, False, 8),
    "E": (8, 4, True, None), "F": (8, 4, False, None),
    "G": (16, 4, True, 8), "H": (16, 4, False, 8),
}
PAPER_COUNTS = {"A": 33_104, "B": 33_084, "C": 58_208, "D": 58_172,
                "E": 58_342, "F": 58_318, "G": 108_534, "H": 108_494}


class ElementWiseNet(nn.Module):
  """``model_name='elementwise'``: ``ElementWiseNet(variant='B',
  num_classes=10)``.

  Attributes:
    variant: ``A``..``H`` (``PRESETS``), or None to use the fields below.
    heads, layers, bn, head_groups: the architecture (override the variant
      when set).
    shared_relevance_bn: one relevance BN for all layers (inferred, see the
      module docstring).
    skip: skip connection in every layer.
    init_std: N(0, init_std) for every weight, biases 0 (paper: 0.02).
  """
  num_classes: int = 10
  variant: Optional[str] = "B"
  heads: Optional[int] = None
  layers: Optional[int] = None
  bn: Optional[bool] = None
  head_groups: Optional[int] = None
  shared_relevance_bn: bool = True
  skip: bool = True
  init_std: float = 0.02
  dtype: Any = None

  def __post_init__(self):
    self._arch()  # an unknown variant is a config error when built
    super().__post_init__()

  def _arch(self):
    if self.variant is None:
      arch = [8, 2, False, None]
    elif self.variant in PRESETS:
      arch = list(PRESETS[self.variant])
    else:
      raise ValueError(f"unknown element-wise variant {self.variant!r}; "
                       f"valid: {', '.join(PRESETS)}")
    for i, k in enumerate(("heads", "layers", "bn", "head_groups")):
      if getattr(self, k) is not None:
        arch[i] = getattr(self, k)
    return arch

  @nn.compact
  def __call__(self, images, train: bool = False):
    heads, layers, bn, groups = self._arch()
    rel_bn = lambda name: nn.BatchNorm(use_running_average=not train,
                                       momentum=0.9, epsilon=1e-5, name=name)
    shared = rel_bn("relevance_bn") if bn and self.shared_relevance_bn else None
    x = images
    for i in range(layers):
      norm = shared
      if bn and not self.shared_relevance_bn:
        norm = rel_bn(f"relevance_bn_{i}")
      x = ElementWiseAttention(
          heads=heads, bn=bn, relevance_norm=norm, head_groups=groups,
          skip=self.skip, init_std=self.init_std, dtype=self.dtype,
          name=f"layer{i}")(x, train)
    x = x.reshape(x.shape[0], -1).astype(jnp.float32)
    self.sow("intermediates", "pre_logits", x)
    return nn.Dense(self.num_classes, name="head",
                    kernel_init=nn.initializers.normal(self.init_std))(x)


class VGGControl(nn.Module):
  """The paper's VGG-like control: 929,510 params (28x28x1), 961,310
  (32x32x3).

  conv3x3(100) conv3x3(100) conv2x2/2(100, no bias) conv3x3(200) conv3x3(200)
  conv2x2/2(200, no bias), ReLU after each, then ``Dense(10)``.
  """
  num_classes: int = 10
  init_std: float = 0.02
  dtype: Any = None

  @nn.compact
  def __call__(self, images, train: bool = False):
    del train  # no BatchNorm / dropout
    init = nn.initializers.normal(self.init_std)
    x = images
    for i, (width, k, stride, bias) in enumerate(
        [(100, 3, 1, True), (100, 3, 1, True), (100, 2, 2, False),
         (200, 3, 1, True), (200, 3, 1, True), (200, 2, 2, False)]):
      x = nn.Conv(width, (k, k), strides=(stride, stride),
                  padding=1 if k == 3 else 0, use_bias=bias,
                  kernel_init=init, dtype=self.dtype, name=f"conv{i + 1}")(x)
      x = nn.relu(x)
    x = x.reshape(x.shape[0], -1).astype(jnp.float32)
    self.sow("intermediates", "pre_logits", x)
    return nn.Dense(self.num_classes, kernel_init=init, name="head")(x)
