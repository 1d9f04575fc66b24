"""Vision Transformer with big_vision's variants and parameter names.

Dosovitskiy et al. 2021, as refactored in big_vision (Beyer et al. 2022):
pre-LN encoder blocks, posemb added to the patch tokens *before* the class
token is prepended, pools ``gap | tok | map``, optional tanh ``pre_logits``.
Module names mirror big_vision's ``vit.py`` so a big_vision ``.npz`` loads
with ``softattn.models.big_vision_io.load_big_vision_npz``:

    embedding/{kernel,bias}                 patch conv [p, p, C, D]
    pos_embedding                           [1, h*w, D]   (posemb='learn')
    cls                                     [1, 1, D]     (pool='tok')
    registers                               [1, R, D]     (num_registers=R;
                                             not in big_vision)
    Transformer/encoderblock_{i}/...        (scan=True: Transformer/encoderblock
                                             with a leading depth axis)
        LayerNorm_0, MultiHeadDotProductAttention_0/{query,key,value,out},
        LayerNorm_1, MlpBlock_0/{Dense_0,Dense_1}
    Transformer/encoder_norm
    MAPHead_0/{probe,MultiHeadDotProductAttention_0,LayerNorm_0,MlpBlock_0}
    pre_logits                              (rep_size; ours: pre_logits_dense,
                                             see PRE_LOGITS)
    head

Additions that big_vision does not have live under names it never uses
(``norm_*`` learnable normalizer parameters, ``gate``, ``query_ln``/``key_ln``)
and are kept from the model's own init when loading.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from softattn import models
from softattn.modes import check_soft_cap
from softattn.nn import diagnostics as diag
from softattn.nn.attention import MultiHeadAttention

# big_vision's table (Zhai et al. 2022, Table 2; "mu" is big_vision's tiny
# test model): width, depth, mlp_dim, heads.
VARIANTS = {
    "mu": (32, 1, 128, 2),
    "Ti": (192, 12, 768, 3),
    "S": (384, 12, 1536, 6),
    "M": (512, 12, 2048, 8),
    "B": (768, 12, 3072, 12),
    "L": (1024, 24, 4096, 16),
    "So400m": (1152, 27, 4304, 16),
    "H": (1280, 32, 5120, 16),
    "g": (1408, 40, 6144, 16),
    "G": (1664, 48, 8192, 16),
}
POOLS = ("gap", "tok", "map")
PRE_LOGITS = "pre_logits_dense"  # big_vision: "pre_logits"
POSEMBS = ("learn", "sincos2d")


def decode_variant(variant: Optional[str]) -> dict:
  """``"S/16"`` -> ``dict(width=384, depth=12, mlp_dim=1536, num_heads=6,
  patch_size=(16, 16))``; ``"S"`` leaves the patch size alone."""
  if variant is None:
    return {}
  name, _, patch = variant.partition("/")
  if name not in VARIANTS:
    raise ValueError(f"unknown ViT variant {name!r} in {variant!r}; valid: "
                     f"{', '.join(VARIANTS)} (optionally '/<patch>', e.g. "
                     f"'S/16')")
  width, depth, mlp_dim, heads = VARIANTS[name]
  out = dict(width=width, depth=depth, mlp_dim=mlp_dim, num_heads=heads)
  if patch:
    if not patch.isdigit() or int(patch) < 1:
      raise ValueError(f"bad patch size {patch!r} in ViT variant {variant!r}; "
                       f"write e.g. 'B/16'")
    out["patch_size"] = (int(patch), int(patch))
  return out


def posemb_sincos_2d(h, w, width, temperature=10_000.0, dtype=jnp.float32):
  """Fixed 2-D sin-cos position embedding ``[1, h*w, width]`` (MoCo v3).

  A quarter of the channels each for ``sin(x w_k)``, ``cos(x w_k)``,
  ``sin(y w_k)``, ``cos(y w_k)`` with ``w_k = temperature^(-k/(width/4-1))``.
  """
  if width % 4:
    raise ValueError(f"sincos2d posemb needs width divisible by 4, got {width}")
  quarter = width // 4
  omega = 1.0 / temperature ** (jnp.arange(quarter) / max(quarter - 1, 1))
  yy, xx = jnp.meshgrid(jnp.arange(h), jnp.arange(w), indexing="ij")
  x = xx.reshape(-1, 1) * omega[None]
  y = yy.reshape(-1, 1) * omega[None]
  pe = jnp.concatenate([jnp.sin(x), jnp.cos(x), jnp.sin(y), jnp.cos(y)], 1)
  return pe[None].astype(dtype)


def infer_grid(rows: int, like: Sequence[int]) -> tuple[int, int]:
  """The patch grid ``(h, w)`` with ``h * w == rows`` and the aspect ratio of
  ``like`` ``(h', w')`` (square for a square ``like``).

  Raises:
    ValueError: no such grid (the message says to give the grid).
  """
  lh, lw = int(like[0]), int(like[1])
  h = int(round(np.sqrt(rows * lh / lw)))
  w = rows // h if h else 0
  if h < 1 or h * w != rows or h * lw != w * lh:
    raise ValueError(f"a position embedding of {rows} rows is no patch grid "
                     f"of aspect {lh}:{lw}; pass its grid (old_grid=(h, w))")
  return h, w


def _interpolate_axis(x, size: int, axis: int):
  """Linear interpolation of ``x`` along ``axis`` to ``size`` samples, the
  ends aligned: sample ``i`` is at input coordinate ``i (n - 1) / (size - 1)``
  (one sample: the middle)."""
  n = x.shape[axis]
  if size == 1:
    pos = np.full((1,), (n - 1) / 2.0)
  else:
    pos = np.arange(size) * ((n - 1) / (size - 1))
  lo = np.clip(np.floor(pos).astype(np.int64), 0, n - 1)
  hi = np.minimum(lo + 1, n - 1)
  frac = (pos - lo).reshape([-1 if a == axis else 1 for a in range(x.ndim)])
  return (np.take(x, lo, axis=axis) * (1.0 - frac)
          + np.take(x, hi, axis=axis) * frac)


def resample_posemb(posemb, new_grid: Sequence[int],
                    old_grid: Optional[Sequence[int]] = None, *,
                    num_prefix: int = 0) -> np.ndarray:
  """A learned position embedding moved to another patch grid (bilinear).

  ``posemb`` is ``[1, num_prefix + gh * gw, D]``: ``num_prefix`` rows that
  belong to no grid cell (the class token's, with ``posemb_with_cls``),
  kept as they are, then the grid in row-major order, resized to
  ``new_grid`` ``(nh, nw)`` by bilinear interpolation with the corners
  aligned (row ``i`` of the new grid samples old row ``i (gh - 1) / (nh -
  1)``, likewise columns). So a grid resampled to itself is returned
  exactly, the four corner embeddings are kept, and an embedding that is
  linear in the patch coordinates stays linear. (The sampling of
  ``scipy.ndimage.zoom(order=1)``, which big_vision's ``resample_posemb``
  uses; written here with numpy.) A sin-cos embedding is not resampled but
  recomputed for the new grid (``posemb_sincos_2d``; the ViT does that at
  every call).

  Args:
    posemb: the embedding (numpy or jax array).
    new_grid: ``(nh, nw)`` patches.
    old_grid: ``(gh, gw)``; default: the grid of ``new_grid``'s aspect ratio
      with that many rows (``infer_grid``).
    num_prefix: rows before the grid.

  Returns:
    ``[1, num_prefix + nh * nw, D]`` numpy array of ``posemb``'s dtype.
  """
  pe = np.asarray(posemb)
  if pe.ndim != 3 or pe.shape[0] != 1:
    raise ValueError(f"posemb must be [1, rows, D], got shape {pe.shape}")
  prefix, grid = pe[:, :num_prefix], pe[:, num_prefix:]
  nh, nw = (int(new_grid[0]), int(new_grid[1]))
  gh, gw = (infer_grid(grid.shape[1], new_grid) if old_grid is None
            else (int(old_grid[0]), int(old_grid[1])))
  if gh * gw != grid.shape[1]:
    raise ValueError(f"old_grid={(gh, gw)} has {gh * gw} cells but the "
                     f"posemb has {grid.shape[1]} grid rows")
  x = grid[0].reshape(gh, gw, -1).astype(np.float64)
  x = _interpolate_axis(_interpolate_axis(x, nh, 0), nw, 1)
  x = x.reshape(1, nh * nw, -1).astype(pe.dtype)
  return np.concatenate([prefix, x], axis=1)


class MlpBlock(nn.Module):
  """``Dense(mlp_dim) -> GELU -> Dropout -> Dense(D)`` (big_vision init)."""
  mlp_dim: Optional[int] = None
  dropout: float = 0.0
  dtype_mm: Any = None

  @nn.compact
  def __call__(self, x, deterministic=True):
    inits = dict(kernel_init=nn.initializers.xavier_uniform(),
                 bias_init=nn.initializers.normal(stddev=1e-6),
                 dtype=self.dtype_mm)
    d = x.shape[-1]
    x = nn.Dense(self.mlp_dim or 4 * d, **inits)(x)
    x = nn.gelu(x)
    x = nn.Dropout(rate=self.dropout)(x, deterministic)
    return nn.Dense(d, **inits)(x)


class Encoder1DBlock(nn.Module):
  """Pre-LN block: ``x + MHA(LN(x))`` then ``x + MLP(LN(x))``."""
  mlp_dim: Optional[int] = None
  num_heads: int = 12
  dropout: float = 0.0
  attention: Any = None  # dict of MultiHeadAttention kwargs
  dtype_mm: Any = None

  @nn.compact
  def __call__(self, x, deterministic=True):
    y = nn.LayerNorm()(x)
    y = MultiHeadAttention(
        num_heads=self.num_heads, dtype=self.dtype_mm,
        kernel_init=nn.initializers.xavier_uniform(),
        name="MultiHeadDotProductAttention_0", **dict(self.attention or {}))(y)
    y = nn.Dropout(rate=self.dropout)(y, deterministic)
    x = x + y
    y = nn.LayerNorm()(x)
    y = MlpBlock(mlp_dim=self.mlp_dim, dropout=self.dropout,
                 dtype_mm=self.dtype_mm)(y, deterministic)
    y = nn.Dropout(rate=self.dropout)(y, deterministic)
    x = x + y
    if diag.wants_sinks(self):  # the residual stream's high-norm tokens
      diag.sow_sinks(self, diag.token_norm_statistics(x))
    return x, None  # (carry, out) so that nn.scan can drive it


class Encoder(nn.Module):
  """``depth`` blocks then ``encoder_norm``; ``scan=True`` stacks the blocks'
  parameters on a leading axis (one compiled block, remat per layer);
  ``remat=True`` without scan rematerialises each block, unrolled (the same
  parameter names as the plain stack)."""
  depth: int
  mlp_dim: Optional[int] = None
  num_heads: int = 12
  dropout: float = 0.0
  attention: Any = None
  dtype_mm: Any = None
  scan: bool = False
  remat: bool = False
  remat_policy: str = "nothing_saveable"

  @nn.compact
  def __call__(self, x, deterministic=True):
    kw = dict(mlp_dim=self.mlp_dim, num_heads=self.num_heads,
              dropout=self.dropout, attention=self.attention,
              dtype_mm=self.dtype_mm)
    policy = getattr(jax.checkpoint_policies, self.remat_policy, None)
    if (self.scan or self.remat) and policy is None:
      raise ValueError(f"unknown remat_policy {self.remat_policy!r}; use a "
                       f"name from jax.checkpoint_policies")
    attention = dict(self.attention or {})
    differential = attention.get("differential", False)
    if self.scan and differential and attention.get("diff_lambda_init") is None:
      raise ValueError(
          "differential attention's lambda_init depends on the layer, which "
          "scan=True shares across layers; set diff_lambda_init (e.g. 0.8) "
          "or scan=False")
    if self.scan:
      # Inside scan, CSE cannot merge the recompute away: no barrier needed.
      block = nn.remat(Encoder1DBlock, prevent_cse=False, policy=policy,
                       static_argnums=(2,))
      stack = nn.scan(
          block,
          variable_axes={"params": 0, "diagnostics": 0,
                         "attention_weights": 0, "intermediates": 0,
                         diag.SINKS: 0},
          split_rngs={"params": True, "dropout": True},
          in_axes=nn.broadcast, length=self.depth)
      x, _ = stack(name="encoderblock", **kw)(x, deterministic)
    else:
      # Unrolled remat keeps XLA's cost analysis exact (it counts a scanned
      # loop body once), which the AOT launch table relies on.
      block = (nn.remat(Encoder1DBlock, policy=policy, static_argnums=(2,))
               if self.remat else Encoder1DBlock)
      for i in range(self.depth):
        if differential:  # lambda_init follows the depth (Ye et al. 2024)
          kw["attention"] = {**attention, "layer_index": i}
        x, _ = block(name=f"encoderblock_{i}", **kw)(x, deterministic)
    return nn.LayerNorm(name="encoder_norm")(x)


class MAPHead(nn.Module):
  """Multihead attention pooling: a learned probe attends to the tokens (the
  ViT passes the patch tokens only)."""
  mlp_dim: Optional[int] = None
  num_heads: int = 12
  attention: Any = None
  dtype_mm: Any = None

  @nn.compact
  def __call__(self, x):
    n, l, d = x.shape
    diag.sow_token_kinds(self, np.full((l,), diag.PATCH))
    probe = self.param("probe", nn.initializers.xavier_uniform(), (1, 1, d),
                       jnp.float32)
    probe = jnp.broadcast_to(probe, (n, 1, d)).astype(x.dtype)
    x = MultiHeadAttention(
        num_heads=self.num_heads, dtype=self.dtype_mm,
        kernel_init=nn.initializers.xavier_uniform(),
        name="MultiHeadDotProductAttention_0",
        **dict(self.attention or {}))(probe, x)
    y = nn.LayerNorm()(x)
    x = x + MlpBlock(mlp_dim=self.mlp_dim, dtype_mm=self.dtype_mm)(y)
    return x[:, 0]


class ViT(nn.Module):
  """Vision Transformer (``model_name='vit'``): ``ViT(variant='S/16', ...)``.

  Attributes:
    num_classes: head width; 0/None: no head (returns pre-logits).
    variant: big_vision variant ``"<size>/<patch>"`` (sizes in ``VARIANTS``).
    patch_size, width, depth, mlp_dim, num_heads: the architecture; when set
      they override the variant's values (default: ViT-B/16).
    posemb: ``learn`` (normal(1/sqrt(width)) init) or ``sincos2d`` (fixed).
    posemb_with_cls: add the position embedding *after* prepending the class
      token (the original ViT layout, ``1 + h*w`` entries; this is what the
      well-known ViT-B/16 count 86,567,656 includes). Default False is
      big_vision's layout (``h*w`` entries, 768 fewer parameters for B/16).
    pool: ``gap`` (mean of the patch tokens), ``tok`` (class token), ``map``
      (MAP head over the patch tokens).
    num_registers: register tokens (Darcet et al. 2023, "Vision Transformers
      Need Registers", arXiv 2309.16588): ``R`` learned tokens
      (``registers`` ``[1, R, D]``, init normal(1e-6) as DINOv2's code)
      appended after the patch tokens (and after the class token, which
      comes first), with no position embedding, and dropped after the
      encoder, so no pooling sees them. They lengthen the sequence:
      ``L = [1 +] h*w + R``. 0 (default): the model without them, the same
      parameters and logits bit for bit.
    rep_size: ``pre_logits`` width (``True``: ``width``) with tanh; 0: none.
    dropout: dropout rate after the posemb and inside every block.
    head_zeroinit: zero-init the head kernel (big_vision default).
    head_bias_init: head bias init (-10 for i21k sigmoid-CE, ReLU paper).
    normalizer, qk_layernorm, gated, output_gate, differential,
    diff_lambda_init, implementation, chunk_size, learnable_init,
    attention_scale, logits_soft_cap: ``MultiHeadAttention`` settings used
      by every attention layer (MAP head included; it counts as layer
      ``depth`` for the differential ``lambda_init``). ``logits_soft_cap``
      (None: no cap) caps the scaled scores at ``c tanh(s / c)``; checked
      when the model is built.
    scan: ``nn.scan`` over layers with ``nn.remat`` (``remat_policy``).
    remat: ``nn.remat`` per layer (``remat_policy``), layers unrolled:
      activation memory of one block's inputs per layer, ~1/3 more FLOPs.
    dtype_mm: matmul dtype (e.g. ``"bfloat16"``); parameters stay float32,
      logits are returned in float32.
  """
  num_classes: Optional[int] = 1000
  variant: Optional[str] = None
  patch_size: Optional[Sequence[int]] = None
  width: Optional[int] = None
  depth: Optional[int] = None
  mlp_dim: Optional[int] = None
  num_heads: Optional[int] = None
  posemb: str = "learn"
  posemb_with_cls: bool = False
  pool: str = "gap"
  num_registers: int = 0
  rep_size: int | bool = 0
  dropout: float = 0.0
  head_zeroinit: bool = True
  head_bias_init: float = 0.0
  normalizer: str = "softmax"
  qk_layernorm: bool = False
  gated: bool = False
  output_gate: Optional[str] = None
  differential: bool = False
  diff_lambda_init: Optional[float] = None
  implementation: str = "auto"
  chunk_size: Optional[int] = None
  learnable_init: Optional[dict] = None
  attention_scale: Optional[float] = None
  logits_soft_cap: Optional[float] = None
  scan: bool = False
  remat: bool = False
  remat_policy: str = "nothing_saveable"
  dtype_mm: Any = None

  def __post_init__(self):
    # A bad field fails where the model is built (configlib.build_model: a
    # config error, one line, before the workdir exists), not while tracing
    # the first step after it; depth 0 even trained, a ViT without blocks.
    self._check(self._arch())
    super().__post_init__()

  def _check(self, a):
    """Raises ``ValueError`` (one line, naming the field) for a bad field."""
    if self.pool not in POOLS:
      raise ValueError(f"unknown pool {self.pool!r}; valid: {', '.join(POOLS)}")
    if self.posemb not in POSEMBS:
      raise ValueError(f"unknown posemb {self.posemb!r}; valid: "
                       f"{', '.join(POSEMBS)}")
    if (isinstance(self.num_registers, bool)
        or not isinstance(self.num_registers, (int, np.integer))
        or self.num_registers < 0):
      raise ValueError(f"num_registers={self.num_registers!r} is invalid; "
                       f"use a count >= 0 (0: no register tokens, 4: "
                       f"Darcet et al.'s choice)")
    models.check_counts(
        dict(depth=("a ViT needs an encoder block; depth 0 would be a linear "
                    "probe of the patch embedding")),
        depth=a["depth"], width=a["width"], num_heads=a["num_heads"],
        mlp_dim=a["mlp_dim"] or None)  # 0/None: 4 * width (MlpBlock)
    if len(a["patch_size"]) != 2 or min(a["patch_size"]) < 1:
      raise ValueError(f"patch_size={a['patch_size']!r} is invalid; use two "
                       f"sides >= 1, e.g. (16, 16).")
    width = a["width"]
    models.check_heads(width, a["num_heads"])
    if self.posemb == "sincos2d" and width % 4:
      raise ValueError(f"posemb='sincos2d' needs width divisible by 4, got "
                       f"width={width}; change width or use posemb='learn'.")
    if not 0.0 <= self.dropout < 1.0:
      raise ValueError(f"dropout={self.dropout!r} is invalid; it must be in "
                       f"[0, 1).")
    check_soft_cap(self.logits_soft_cap)

  def check_input(self, image_shape) -> None:
    """Raises ``ValueError`` if images of ``image_shape`` ``(H, W, C)`` cannot
    be cut into patches (``configlib.build_model`` runs it with the dataset's
    image shape, before anything is traced)."""
    ph, pw = self._arch()["patch_size"]
    h, w = image_shape[0], image_shape[1]
    if h % ph or w % pw:
      raise ValueError(f"image size {(h, w)} is not a multiple of the patch "
                       f"size {(ph, pw)}; resize or pick another patch")

  def token_kinds(self, grid) -> np.ndarray:
    """``int32[L]``: the kind of each encoder token for a patch ``grid``
    ``(h, w)``: ``diagnostics.CLS`` (pool ``tok``), then ``PATCH`` for the
    ``h*w`` patches, then ``REGISTER`` for the ``num_registers`` registers."""
    cls = [diag.CLS] if self.pool == "tok" else []
    return np.asarray(cls + [diag.PATCH] * (int(grid[0]) * int(grid[1]))
                      + [diag.REGISTER] * int(self.num_registers), np.int32)

  def _arch(self):
    # ViT-B/16 < variant < fields set explicitly (as big_vision's factory).
    arch = dict(patch_size=(16, 16), width=768, depth=12, mlp_dim=None,
                num_heads=12)
    arch.update(decode_variant(self.variant))
    for k in arch:
      if getattr(self, k) is not None:
        arch[k] = getattr(self, k)
    p = arch["patch_size"]
    arch["patch_size"] = (p, p) if isinstance(p, int) else tuple(p)
    return arch

  @nn.compact
  def __call__(self, images, train: bool = False):
    a = self._arch()  # fields checked when the module was built
    dtype_mm = jnp.dtype(self.dtype_mm) if self.dtype_mm else None
    attention = dict(normalizer=self.normalizer, qk_layernorm=self.qk_layernorm,
                     gated=self.gated, implementation=self.implementation,
                     chunk_size=self.chunk_size,
                     learnable_init=self.learnable_init,
                     scale=self.attention_scale, output_gate=self.output_gate,
                     differential=self.differential,
                     diff_lambda_init=self.diff_lambda_init,
                     logits_soft_cap=self.logits_soft_cap)
    ph, pw = a["patch_size"]
    self.check_input(images.shape[1:])
    x = nn.Conv(a["width"], (ph, pw), strides=(ph, pw), padding="VALID",
                dtype=dtype_mm, name="embedding")(images)
    n, h, w, c = x.shape
    x = x.reshape(n, h * w, c)

    def posemb(tokens):
      if self.posemb == "learn":
        return self.param("pos_embedding",
                          nn.initializers.normal(stddev=1 / np.sqrt(c)),
                          (1, tokens, c), jnp.float32)
      pe = posemb_sincos_2d(h, w, c)
      if tokens == h * w + 1:  # the class token gets no position
        pe = jnp.concatenate([jnp.zeros((1, 1, c)), pe], 1)
      return pe

    if not (self.pool == "tok" and self.posemb_with_cls):
      x = x + posemb(h * w).astype(x.dtype)
    if self.pool == "tok":
      cls = self.param("cls", nn.initializers.zeros, (1, 1, c), jnp.float32)
      x = jnp.concatenate([jnp.broadcast_to(cls, (n, 1, c)).astype(x.dtype),
                           x], axis=1)
      if self.posemb_with_cls:
        x = x + posemb(h * w + 1).astype(x.dtype)
    r = int(self.num_registers)
    if r:  # after the posemb: registers have no position
      regs = self.param("registers", nn.initializers.normal(stddev=1e-6),
                        (1, r, c), jnp.float32)
      x = jnp.concatenate(
          [x, jnp.broadcast_to(regs, (n, r, c)).astype(x.dtype)], axis=1)
    diag.sow_token_kinds(self, self.token_kinds((h, w)))
    x = nn.Dropout(rate=self.dropout)(x, not train)

    x = Encoder(depth=a["depth"], mlp_dim=a["mlp_dim"],
                num_heads=a["num_heads"], dropout=self.dropout,
                attention=attention, dtype_mm=dtype_mm, scan=self.scan,
                remat=self.remat, remat_policy=self.remat_policy, name="Transformer")(
                    x, deterministic=not train)
    if r:
      x = x[:, :-r]  # pooling sees the class token and the patches only

    if self.pool == "map":
      head_attention = ({**attention, "layer_index": a["depth"]}
                        if self.differential else attention)
      x = MAPHead(num_heads=a["num_heads"], mlp_dim=a["mlp_dim"],
                  attention=head_attention, dtype_mm=dtype_mm)(x)
    elif self.pool == "gap":
      x = jnp.mean(x, axis=1)
    else:
      x = x[:, 0]

    if self.rep_size:
      rep = c if self.rep_size is True else int(self.rep_size)
      # big_vision names this Dense "pre_logits"; flax forbids a module and
      # the sown "pre_logits" sharing a name, so the npz loader renames it.
      x = nn.tanh(nn.Dense(rep, dtype=dtype_mm, name=PRE_LOGITS)(x))
    x = x.astype(jnp.float32)
    self.sow("intermediates", "pre_logits", x)
    if not self.num_classes:
      return x
    kernel_init = (nn.initializers.zeros if self.head_zeroinit
                   else nn.initializers.lecun_normal())
    return nn.Dense(self.num_classes, kernel_init=kernel_init,
                    bias_init=nn.initializers.constant(self.head_bias_init),
                    name="head")(x)
