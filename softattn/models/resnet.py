"""ResNet family with optional non-local blocks.

* ``PreResNet`` (He et al. 2016, identity mappings): pre-activation blocks,
  CIFAR stem (3x3 conv, 16 channels) and 3 stages for depth ``6n+2`` (basic
  blocks: 20/32/56/110) or ``9n+2`` (bottleneck: 164); ``depth=50`` is the
  ImageNet-layout bottleneck [3, 4, 6, 3] net used at 56 px for Tiny-ImageNet.
* ``WideResNet`` (Zagoruyko & Komodakis 2016): WRN-d-k, pre-activation basic
  blocks with widths 16k/32k/64k and dropout between the convs.
* ``ResNet`` (He et al. 2016; "v1.5": stride in the 3x3 conv) for ImageNet:
  depth 18/34/50/101/152.

Non-local blocks (``softattn.nn.NonLocalBlock2D``) are inserted after
residual blocks of one stage by ``nl_blocks`` (``NLConfig``), e.g. the scaled
NL paper's setup ``nl_blocks=dict(count=3, stage=2, heads=4,
normalizer="scaled")``.

Conventions: convs without bias, He-normal (fan-out) init as torchvision;
BatchNorm momentum 0.9 (PyTorch's 0.1), epsilon 1e-5.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

import flax.linen as nn
import jax.numpy as jnp

from softattn.nn.nonlocal_block import NonLocalBlock2D

conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


@dataclasses.dataclass(frozen=True)
class NLConfig:
  """Where and how non-local blocks go.

  Attributes:
    count: number of NL blocks (0: none).
    stage: 1-based residual stage that receives them (Cho et al.: 2).
    heads: heads per block (0 also means none, Table 3's "0 heads").
    normalizer: ``softmax`` (NL), ``scaled`` (scaled NL) or any registry spec;
      ``None`` takes the model's ``normalizer``.
    init, mode, posenc, subsample, embed_channels, implementation: passed to
      ``NonLocalBlock2D``.

  Placement (*inferred*; the paper says only "inserted in the second residual
  stage"): one NL block after the middle block of each of ``count`` equal
  segments of the stage's ``n`` blocks, i.e. after blocks
  ``floor((2j+1) n / (2 count))``, ``j < count`` (PreResNet-56, n=9: after
  blocks 1, 4, 7; always distinct since ``count <= n``).
  """
  count: int = 3
  stage: int = 2
  heads: int = 4
  normalizer: Optional[str] = None
  init: str = "normal"
  mode: str = "base"
  posenc: bool = True
  subsample: int = 1
  embed_channels: Optional[int] = None
  implementation: str = "auto"

  @classmethod
  def make(cls, spec) -> "NLConfig | None":
    """None/0: no NL; an int: that many with defaults; a mapping: fields."""
    if spec is None or spec is False or spec == 0:
      return None
    if isinstance(spec, NLConfig):
      cfg = spec
    elif isinstance(spec, int):
      cfg = cls(count=spec)
    elif isinstance(spec, Mapping) or hasattr(spec, "to_dict"):
      spec = spec.to_dict() if hasattr(spec, "to_dict") else dict(spec)
      names = {f.name for f in dataclasses.fields(cls)}
      unknown = sorted(set(spec) - names)
      if unknown:
        raise ValueError(f"unknown nl_blocks field(s) {unknown}; valid: "
                         f"{', '.join(sorted(names))}")
      cfg = cls(**spec)
    else:
      raise ValueError(f"nl_blocks must be None, an int or a dict, got "
                       f"{spec!r}")
    return None if cfg.count == 0 or cfg.heads == 0 else cfg

  def positions(self, n_blocks: int) -> set[int]:
    if self.count > n_blocks:
      raise ValueError(f"nl_blocks.count={self.count} exceeds the {n_blocks} "
                       f"blocks of stage {self.stage}")
    return {(2 * j + 1) * n_blocks // (2 * self.count)
            for j in range(self.count)}

  def block(self, normalizer, dtype, name):
    return NonLocalBlock2D(
        heads=self.heads, normalizer=self.normalizer or normalizer,
        embed_init=self.init, mode=self.mode, posenc=self.posenc,
        subsample=self.subsample, embed_channels=self.embed_channels,
        implementation=self.implementation, dtype=dtype, name=name)


def _bn(train, name=None, zero=False):
  return nn.BatchNorm(use_running_average=not train, momentum=0.9,
                      epsilon=1e-5, name=name,
                      scale_init=nn.initializers.zeros if zero
                      else nn.initializers.ones)


def _conv(features, kernel, strides=1, dtype=None, name=None):
  k = (kernel, kernel)
  return nn.Conv(features, k, strides=(strides, strides),
                 padding=[(kernel // 2, kernel // 2)] * 2, use_bias=False,
                 kernel_init=conv_init, dtype=dtype, name=name)


class PreActBasic(nn.Module):
  """BN-ReLU-conv3x3(stride)-BN-ReLU-[dropout]-conv3x3 + shortcut."""
  features: int
  strides: int = 1
  dropout: float = 0.0
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train=False):
    y = nn.relu(_bn(train)(x))
    shortcut = x
    if self.strides != 1 or x.shape[-1] != self.features:
      shortcut = _conv(self.features, 1, self.strides, self.dtype)(y)
    y = _conv(self.features, 3, self.strides, self.dtype)(y)
    y = nn.relu(_bn(train)(y))
    y = nn.Dropout(self.dropout)(y, deterministic=not train)
    y = _conv(self.features, 3, 1, self.dtype)(y)
    return y + shortcut


class PreActBottleneck(nn.Module):
  """BN-ReLU-1x1-BN-ReLU-3x3(stride)-BN-ReLU-1x1(4x) + shortcut."""
  features: int
  strides: int = 1
  dropout: float = 0.0
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train=False):
    out = self.features * 4
    y = nn.relu(_bn(train)(x))
    shortcut = x
    if self.strides != 1 or x.shape[-1] != out:
      shortcut = _conv(out, 1, self.strides, self.dtype)(y)
    y = _conv(self.features, 1, 1, self.dtype)(y)
    y = nn.relu(_bn(train)(y))
    y = _conv(self.features, 3, self.strides, self.dtype)(y)
    y = nn.relu(_bn(train)(y))
    y = _conv(out, 1, 1, self.dtype)(y)
    return y + shortcut


class Bottleneck(nn.Module):
  """Post-activation bottleneck (v1.5: stride on the 3x3)."""
  features: int
  strides: int = 1
  zero_init_residual: bool = False
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train=False):
    out = self.features * 4
    y = nn.relu(_bn(train)(_conv(self.features, 1, 1, self.dtype)(x)))
    y = nn.relu(_bn(train)(_conv(self.features, 3, self.strides,
                                 self.dtype)(y)))
    y = _bn(train, zero=self.zero_init_residual)(_conv(out, 1, 1,
                                                       self.dtype)(y))
    if self.strides != 1 or x.shape[-1] != out:
      x = _bn(train)(_conv(out, 1, self.strides, self.dtype)(x))
    return nn.relu(x + y)


class BasicBlock(nn.Module):
  """Post-activation basic block (ResNet-18/34)."""
  features: int
  strides: int = 1
  zero_init_residual: bool = False
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train=False):
    y = nn.relu(_bn(train)(_conv(self.features, 3, self.strides,
                                 self.dtype)(x)))
    y = _bn(train, zero=self.zero_init_residual)(
        _conv(self.features, 3, 1, self.dtype)(y))
    if self.strides != 1 or x.shape[-1] != self.features:
      x = _bn(train)(_conv(self.features, 1, self.strides, self.dtype)(x))
    return nn.relu(x + y)


def _stages(x, train, block, widths, counts, strides, nl, normalizer,
            dtype, **block_kw):
  """Runs the residual stages, inserting NL blocks after the chosen ones."""
  if nl is not None and not 1 <= nl.stage <= len(widths):
    raise ValueError(f"nl_blocks.stage={nl.stage} out of range "
                     f"1..{len(widths)}")
  for s, (width, n, stride) in enumerate(zip(widths, counts, strides)):
    where = nl.positions(n) if nl is not None and nl.stage == s + 1 else ()
    for i in range(n):
      x = block(features=width, strides=stride if i == 0 else 1, dtype=dtype,
                name=f"stage{s + 1}_block{i}", **block_kw)(x, train)
      if i in where:
        x = nl.block(normalizer, dtype, f"stage{s + 1}_nl{i}")(x, train)
  return x


def _check_build(stem, nl_blocks, counts) -> None:
  """The fields' checks, run when a model is built (``__post_init__``): a bad
  field is then a config error before the workdir exists, not a traceback
  when the first step is traced. ``counts``: blocks per stage."""
  if stem is not None and stem not in STEMS:
    raise ValueError(f"unknown stem {stem!r}; valid: {', '.join(STEMS)}")
  nl = NLConfig.make(nl_blocks)
  if nl is not None:
    if not 1 <= nl.stage <= len(counts):
      raise ValueError(f"nl_blocks.stage={nl.stage} out of range "
                       f"1..{len(counts)}")
    nl.positions(counts[nl.stage - 1])


def _head(module, x, num_classes):
  x = jnp.mean(x, axis=(1, 2)).astype(jnp.float32)
  module.sow("intermediates", "pre_logits", x)
  if not num_classes:
    return x
  return nn.Dense(num_classes, name="head")(x)


class PreResNet(nn.Module):
  """Pre-activation ResNet (``model_name='preresnet'``); ``depth=56, ...``.

  Attributes:
    depth: 20/32/44/56/110 (``6n+2``, basic blocks, CIFAR), 164 (``9n+2``,
      bottleneck, CIFAR), or 50 (bottleneck [3,4,6,3], widths 64..512 x4).
    num_classes: head width.
    stem: ``cifar`` (3x3 stride-1 conv; default, also used for depth 50 at
      Tiny-ImageNet's 56 px - *inferred*, the paper does not give the stem)
      or ``imagenet`` (7x7 stride 2 + 3x3 max-pool).
    nl_blocks: ``NLConfig`` fields (dict), an int count, or None.
    normalizer: NL blocks' normalizer unless ``nl_blocks`` names one.
    dtype: conv compute dtype.
  """
  depth: int = 56
  num_classes: int = 10
  stem: str = "cifar"
  nl_blocks: Any = None
  normalizer: str = "softmax"
  dtype: Any = None

  def __post_init__(self):
    _check_build(self.stem, self.nl_blocks, self._layout()[1])
    super().__post_init__()

  def _layout(self):
    """``(block, counts, widths, strides, stem_width)`` of ``depth``."""
    if self.depth == 50:
      return (PreActBottleneck, (3, 4, 6, 3), (64, 128, 256, 512),
              (1, 2, 2, 2), 64)
    if self.depth in (164, 1001) or (self.depth - 2) % 6:
      if (self.depth - 2) % 9 or self.depth < 11:
        raise ValueError(f"PreResNet depth {self.depth} is not 6n+2 (basic), "
                         f"9n+2 (bottleneck) or 50, with n >= 1")
      n = (self.depth - 2) // 9
      return PreActBottleneck, (n,) * 3, (16, 32, 64), (1, 2, 2), 16
    if self.depth < 8:  # n = 0: no residual blocks at all
      raise ValueError(f"PreResNet depth {self.depth} is not 6n+2 (basic), "
                       f"9n+2 (bottleneck) or 50, with n >= 1")
    n = (self.depth - 2) // 6
    return PreActBasic, (n,) * 3, (16, 32, 64), (1, 2, 2), 16

  @nn.compact
  def __call__(self, images, train: bool = False):
    nl = NLConfig.make(self.nl_blocks)
    block, counts, widths, strides, stem_width = self._layout()
    x = _stem(images, self.stem, stem_width, train, self.dtype)
    x = _stages(x, train, block, widths, counts, strides, nl,
                self.normalizer, self.dtype)
    x = nn.relu(_bn(train, name="final_bn")(x))
    return _head(self, x, self.num_classes)


class WideResNet(nn.Module):
  """WRN-depth-widen (pre-activation, ``model_name='wrn'``); ``depth=28,
  widen=10``. ``dropout`` between the block's convs (0.3 in the WRN paper for
  some runs; default 0)."""
  depth: int = 28
  widen: int = 10
  num_classes: int = 10
  dropout: float = 0.0
  nl_blocks: Any = None
  normalizer: str = "softmax"
  dtype: Any = None

  def __post_init__(self):
    _check_build(None, self.nl_blocks, (self._blocks(),) * 3)
    super().__post_init__()

  def _blocks(self) -> int:
    """Blocks per stage: ``depth = 6n+4``."""
    if (self.depth - 4) % 6 or self.depth < 10:
      raise ValueError(f"WRN depth {self.depth} is not 6n+4 with n >= 1 "
                       f"(e.g. 16, 28, 40)")
    return (self.depth - 4) // 6

  @nn.compact
  def __call__(self, images, train: bool = False):
    n = self._blocks()
    nl = NLConfig.make(self.nl_blocks)
    x = _conv(16, 3, 1, self.dtype, name="stem_conv")(images)
    widths = tuple(w * self.widen for w in (16, 32, 64))
    x = _stages(x, train, PreActBasic, widths, (n,) * 3, (1, 2, 2), nl,
                self.normalizer, self.dtype, dropout=self.dropout)
    x = nn.relu(_bn(train, name="final_bn")(x))
    return _head(self, x, self.num_classes)


RESNET_LAYERS = {18: (BasicBlock, (2, 2, 2, 2)), 34: (BasicBlock, (3, 4, 6, 3)),
                 50: (Bottleneck, (3, 4, 6, 3)),
                 101: (Bottleneck, (3, 4, 23, 3)),
                 152: (Bottleneck, (3, 8, 36, 3))}


class ResNet(nn.Module):
  """ImageNet ResNet v1.5 (``model_name='resnet'``); ``depth=50,
  num_classes=1000``. ``zero_init_residual``: last BN of each block starts at
  gamma 0 (Goyal et al. 2017; off by default as torchvision)."""
  depth: int = 50
  num_classes: int = 1000
  zero_init_residual: bool = False
  stem: str = "imagenet"
  nl_blocks: Any = None
  normalizer: str = "softmax"
  dtype: Any = None

  def __post_init__(self):
    if self.depth not in RESNET_LAYERS:
      raise ValueError(f"ResNet depth {self.depth} unknown; valid: "
                       f"{', '.join(map(str, RESNET_LAYERS))}")
    _check_build(self.stem, self.nl_blocks, RESNET_LAYERS[self.depth][1])
    super().__post_init__()

  @nn.compact
  def __call__(self, images, train: bool = False):
    block, counts = RESNET_LAYERS[self.depth]
    nl = NLConfig.make(self.nl_blocks)
    x = _stem(images, self.stem, 64, train, self.dtype)
    x = _stages(x, train, block, (64, 128, 256, 512), counts,
                (1, 2, 2, 2), nl, self.normalizer, self.dtype,
                zero_init_residual=self.zero_init_residual)
    return _head(self, x, self.num_classes)


STEMS = ("cifar", "imagenet")


def _stem(x, kind, width, train, dtype):
  if kind == "cifar":
    return _conv(width, 3, 1, dtype, name="stem_conv")(x)
  if kind == "imagenet":
    x = nn.Conv(width, (7, 7), strides=(2, 2), padding=[(3, 3), (3, 3)],
                use_bias=False, kernel_init=conv_init, dtype=dtype,
                name="stem_conv")(x)
    x = nn.relu(_bn(train, name="stem_bn")(x))
    return nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
  raise ValueError(f"unknown stem {kind!r}; valid: {', '.join(STEMS)}")
