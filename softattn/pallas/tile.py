"""What every kernel computes on one ``[bq, bk]`` tile: scores, the valid
mask, and the normalizer's transform read from the declaration.

``Config`` is the static description of one attention call (hashable: it is a
``custom_vjp`` non-differentiable argument). Per-row inputs travel as one f32
array ``rows [B, H, Lq, R]`` whose columns are named by ``Config.row_names``:
the count ``n`` always, ``mean``/``var`` when the normalizer ``needs``
moments, then each parameter given as an array (learnable ones: NormSoftmax's
``w``, ssmax's ``s_scale``, NAP's ``g``/``b``), broadcast per query row.
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
    p = dict(self.static_params)
    return float(p[self.norm.eps_param]) if self.norm.eps_param else 0.0


def row_values(cfg: Config, rows) -> dict[str, jax.Array]:
  """``{name: [bq, 1]}`` from a ``[bq, R]`` rows block."""
  return {name: rows[:, i:i + 1] for i, name in enumerate(cfg.row_names)}


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


def scores(cfg: Config, qi, kj, q, k, mask_row):
  """``(s, valid)``: ``scale q k^T`` in f32 (0 where invalid) and the mask of
  keys that count: inside both true lengths, causal, and the key mask."""
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
  return jnp.where(valid, s, 0.0), valid


def mask_spec(cfg: Config, mask_shape, k_axis: int):
  """BlockSpec of the ``[Bm, Hm, 1, Lk]`` int32 key mask; ``k_axis``: the grid
  axis that walks key blocks. Size-1 batch/head dims broadcast."""
  bm, hm = mask_shape[0], mask_shape[1]

  def index(b, h, i, j):
    kj = (i, j)[k_axis - 2]
    return (b if bm > 1 else 0, h if hm > 1 else 0, 0, kj)
  return pl.BlockSpec((None, None, 1, cfg.bk), index)
