"""What every kernel computes on one ``[bq, bk]`` tile: scores, the valid
mask, and the normalizer's transform read from the declaration.

Layout: the kernels read the caller's ``[B, L, H, D]`` arrays as
``[B, L, H*D]`` (a free reshape, no transpose). A block holds ``bq`` (or
``bk``) positions of ``hp`` consecutive heads, ``[bq, hp*D]``; each kernel
runs its per-head body ``hp`` times on lane slices ``[:, h*D:(h+1)*D]``.
Why ``hp`` heads: Mosaic needs a block's last dimension to be a multiple of
128 lanes (or the whole dimension), so at ``D = 64`` a block carries two
heads (``heads_per_block``). Lengths are not padded: the grid covers
``cdiv(L, block)`` blocks, the last one ragged; positions past the true
length are masked out of the scores and zeroed where they would enter a
matmul (``load``), since a ragged block's tail holds whatever memory follows.

``Config`` is the static description of one attention call (hashable: it is a
``custom_vjp`` non-differentiable argument). Per-row inputs travel as one f32
array ``rows [B, H, Lq, R]`` whose columns are named by ``Config.row_names``:
the count ``n`` always, ``mean``/``var`` when the normalizer ``needs``
moments, then each parameter given as an array (learnable ones: NormSoftmax's
``w``, ssmax's ``s_scale``, NAP's ``g``/``b``, softmax_sink's ``sink``),
broadcast per query row.
The transform sees them as ``[bq, 1]`` columns, which broadcast over keys the
way the dense path broadcasts ``[..., 1]`` statistics.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from softattn.normalizers.core import Normalizer, RowStats

NT = (((1,), (1,)), ((), ()))  # contract the last dims: q k^T, dO v^T
STAT_NAMES = {"none": ("n",), "count": ("n",), "moments": ("n", "mean", "var")}


@dataclasses.dataclass(frozen=True)
class Config:
  norm: Normalizer
  static_params: tuple[tuple[str, Any], ...]
  param_names: tuple[str, ...]   # parameters given as arrays (row columns)
  scale: float
  causal: bool
  lq: int                        # true lengths (the arrays are padded)
  lk: int
  bq: int
  bk: int
  has_mask: bool
  chip: str
  interpret: bool | None         # None: by lowering platform
  hp: int = 1                    # heads per block (see the module doc)
  d: int = 0                     # head dims of q/k and of v
  dv: int = 0
  mask_heads: bool = False       # the key mask differs per head
  logits_soft_cap: float | None = None   # c: scores c tanh(s / c) (``scores``)

  @property
  def ragged_q(self) -> bool:
    return self.lq % self.bq != 0

  @property
  def ragged_k(self) -> bool:
    return self.lk % self.bk != 0

  @property
  def mode(self) -> str:
    return self.norm.mode

  @property
  def moments(self) -> bool:
    return self.norm.needs == "moments"

  @property
  def row_names(self) -> tuple[str, ...]:
    return STAT_NAMES[self.norm.needs] + self.param_names

  @property
  def diff_names(self) -> tuple[str, ...]:
    """Row columns with a cotangent (``n`` depends on the mask only)."""
    return self.row_names[1:]

  @property
  def eps(self) -> float:
    """The mode's scalar as a number (``scalar`` reads it per row when it
    is given as an array)."""
    return float(self.norm.eps(dict(self.static_params)))

  @property
  def scalar_is_row(self) -> bool:
    """Whether the mode's scalar (``Normalizer.eps_param``) comes as an
    array, a row column (a learnable sink), not a compiled-in number."""
    return self.norm.eps_param in self.param_names


def load(ref, h: int, width: int, start, length: int, ragged: bool):
  """Head ``h``'s ``[rows, width]`` slice of a ``[rows, hp*width]`` block,
  rows past ``length`` (the ragged tail; ``start``: the block's first
  position) set to 0 so that they add nothing to a matmul."""
  x = ref[:, pl.ds(h * width, width)]
  if ragged:
    pos = start + jax.lax.broadcasted_iota(jnp.int32, x.shape, 0)
    x = jnp.where(pos < length, x, jnp.zeros_like(x))
  return x


def mask_row(cfg: Config, mask_ref, h: int):
  """Head ``h``'s ``[1, bk]`` key-mask row, or None without a mask."""
  if mask_ref is None:
    return None
  return mask_ref[h] if cfg.mask_heads else mask_ref[...]


def heads_per_block(h: int, d: int, dv: int, lanes: int = 128) -> int:
  """Smallest ``hp`` dividing ``h`` whose blocks are whole lane tiles
  (``hp*d`` and ``hp*dv`` multiples of ``lanes``); ``h`` (the whole last
  dimension, always a legal block) when none is."""
  for hp in range(1, h + 1):
    if h % hp == 0 and (hp * d) % lanes == 0 and (hp * dv) % lanes == 0:
      return hp
  return h


def row_values(cfg: Config, rows) -> dict[str, jax.Array]:
  """``{name: [bq, 1]}`` from a ``[bq, R]`` rows block."""
  return {name: rows[:, i:i + 1] for i, name in enumerate(cfg.row_names)}


def scalar(cfg: Config, rv):
  """The mode's scalar for ``modes.output``: its ``[bq, 1]`` row column
  when given as an array, else the compiled-in number."""
  return rv[cfg.norm.eps_param] if cfg.scalar_is_row else cfg.eps


def transform(cfg: Config, s, rv):
  """``t = T(s, stats, **params)`` for a tile, from the declaration."""
  stats = RowStats(rv["n"], rv.get("mean"), rv.get("var"))
  params = dict(cfg.static_params)
  params.update({k: rv[k] for k in cfg.param_names})
  return cfg.norm.transform(s, stats, **params)


def needed(cfg: Config, qi, kj):
  """False for tiles entirely above the causal diagonal (skipped)."""
  if not cfg.causal:
    return True
  return kj * cfg.bk <= qi * cfg.bq + cfg.bq - 1


def scores(cfg: Config, qi, kj, q, k, mask_row, with_slope: bool = False):
  """``(s, valid)``: ``scale q k^T`` in f32 (0 where invalid) and the mask of
  keys that count: inside both true lengths, causal, and the key mask.

  With ``cfg.logits_soft_cap`` ``c`` the scores are capped, ``s = c tanh(u /
  c)`` for ``u = scale q k^T`` (invalid entries stay 0: the cap of 0 is 0).
  ``with_slope``: also ``ds/du = 1 - tanh(u / c)^2`` (None without a cap),
  which the backward multiplies into ``dS`` before the dQ/dK matmuls; from
  the same ``tanh`` of the raw scores, written ``(1 - t)(1 + t)``: for
  ``|t|`` near 1, where the cap bites, ``1 - |t|`` is exact and ``1 - t*t``
  would lose the rounding of ``t*t`` (splash attention does the same)."""
  s = jax.lax.dot_general(q, k, NT, preferred_element_type=jnp.float32)
  s = s * cfg.scale
  shape = (cfg.bq, cfg.bk)
  qpos = qi * cfg.bq + jax.lax.broadcasted_iota(jnp.int32, shape, 0)
  kpos = kj * cfg.bk + jax.lax.broadcasted_iota(jnp.int32, shape, 1)
  valid = jnp.logical_and(kpos < cfg.lk, qpos < cfg.lq)
  if cfg.causal:
    valid = jnp.logical_and(valid, kpos <= qpos)
  if mask_row is not None:
    valid = jnp.logical_and(valid, mask_row != 0)
  s = jnp.where(valid, s, 0.0)
  slope = None
  if cfg.logits_soft_cap is not None:
    t = jnp.tanh(s / cfg.logits_soft_cap)
    s = cfg.logits_soft_cap * t
    slope = (1.0 - t) * (1.0 + t)
  return (s, valid, slope) if with_slope else (s, valid)


def mask_spec(cfg: Config, mask_shape, k_axis: int):
  """BlockSpec of the ``[Bm, Hm, 1, Lk]`` int32 key mask; ``k_axis``: the grid
  axis that walks key blocks. Size-1 batch/head dims broadcast; per-head
  masks come ``hp`` heads at a time (``mask_row``)."""
  bm = mask_shape[0]

  def index(b, g, i, j):
    kj = (i, j)[k_axis - 2]
    return (b if bm > 1 else 0, g if cfg.mask_heads else 0, 0, kj)
  heads = cfg.hp if cfg.mask_heads else None
  return pl.BlockSpec((None, heads, 1, cfg.bk), index)


def row_spec(cfg: Config, width: int, q_axis: int):
  """BlockSpec of a per-row ``[B, H, Lq, width]`` f32 array (counts,
  statistics, parameters, residuals): ``hp`` heads of ``bq`` rows."""
  def index(b, g, i, j):
    return (b, g, (i, j)[q_axis - 2], 0)
  return pl.BlockSpec((None, cfg.hp, cfg.bq, width), index)


def seq_spec(cfg: Config, block: int, width: int, axis: int):
  """BlockSpec of a ``[B, L, H*width]`` array: ``block`` positions of ``hp``
  heads; ``axis``: the grid axis walking its blocks."""
  def index(b, g, i, j):
    return (b, (i, j)[axis - 2], g)
  return pl.BlockSpec((None, block, cfg.hp * width), index)


def k_blocks(cfg: Config, qi):
  """Key blocks query block ``qi`` streams in the GPU kernels: all, or up to
  the causal diagonal (``lax.div``: ``//`` of traced ints lowers to ops
  Triton lacks)."""
  nk = pl.cdiv(cfg.lk, cfg.bk)
  if not cfg.causal:
    return nk
  return jnp.minimum(nk, jax.lax.div((qi + 1) * cfg.bq + cfg.bk - 1, cfg.bk))


def q_first(cfg: Config, kj):
  """First query block that sees key block ``kj`` (0 unless causal)."""
  return jax.lax.div(kj * cfg.bk, cfg.bq) if cfg.causal else 0
