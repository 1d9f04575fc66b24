"""``gpu_attention`` on Mosaic GPU: padding, transposed operands, custom VJP,
``shard_map``.

The steps are the Triton wrapper's (``gpu/triton/wrapper.py``): per-row
counts and array parameters as row columns (``common/prepare.py``), a
``custom_vjp`` whose forward runs the moments kernel (when the normalizer
``needs`` them) and the attention kernel, and whose backward runs dQ (twice
for moments) and dK/dV. What differs (``tile.py``'s module doc says why):
lengths are padded to whole 64-row blocks (masked by position inside), and
the operands a product needs transposed (``K^T``, ``V^T``, ``Q^T``,
``dO^T``) are made by XLA. ``logits_soft_cap``: the scores become
``c tanh(s / c)`` before the normalizer (None: the program is unchanged).

Supported (``unsupported_reason``): every mode of ``softattn.modes``, head
dims 64, 128 or 256, forced blocks of 64, 128 or 256 (``wgmma``'s M is 64
a warpgroup, its N at most 256), bfloat16/float16 (float32 in the
interpreter only: ``tile.py`` says why). laplace fuses here (``erf``, which
Triton lacks: ``columns.py``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from softattn.modes import MODES
from softattn.pallas.common import prepare, tile
from softattn.pallas.gpu.mosaic import backward as mbwd
from softattn.pallas.gpu.mosaic import forward as mfwd
from softattn.pallas.gpu.mosaic import tile as mtile

ALTERNATIVES = "implementation='chunked' or 'dense' (or 'auto')"


class Operands(NamedTuple):
  """The padded ``[B, L, H, D]`` operands and the transposed ``[B, H, D, L]``
  ones the backward's products read."""
  q: jax.Array
  k: jax.Array
  v: jax.Array
  do: jax.Array
  kT: jax.Array
  vT: jax.Array
  qT: jax.Array
  doT: jax.Array


def unsupported_reason(norm, params=None, d: int = 64, dv: int | None = None,
                       blocks=None, dtype=None) -> str | None:
  """Why the Mosaic GPU kernels cannot run this call, or None (beyond
  ``pallas.wrapper.unsupported_reason``'s reasons). ``blocks``: forced
  ``(bk, bq)``, None entries free; ``dtype``: the inputs'."""
  del params  # every parameter form the TPU wrapper takes works here
  missing = mtile.missing_api()
  if missing:
    return (f"this jax's Pallas Mosaic GPU lacks {', '.join(missing)}; "
            f"the Triton kernels run instead")
  if norm.mode not in MODES:
    return (f"normalizer {norm.name!r} fuses on the TPU kernels only; on GPU "
            f"use implementation='chunked'")
  for name, width in (("head dim", d), ("value head dim", dv or d)):
    if width not in mtile.HEAD_DIMS:
      return (f"the Mosaic GPU kernels need a {name} of 64, 128 or 256, got "
              f"{width}; use {ALTERNATIVES}")
  forced = [b for b in blocks or () if b]
  if any(b not in mtile.BLOCKS for b in forced):
    return (f"the Mosaic GPU kernels need block sizes of 64, 128 or 256, "
            f"got chunk sizes {forced}; use {ALTERNATIVES}")
  if dtype is not None and jnp.dtype(dtype) not in map(jnp.dtype,
                                                       mtile.DTYPES):
    return (f"the Mosaic GPU kernels take float32, bfloat16 or float16, got "
            f"{jnp.dtype(dtype).name}; cast the inputs")
  return None


def _pad(x, axis: int, length: int, mode="constant"):
  if x is None or x.shape[axis] == length:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, length - x.shape[axis])
  return jnp.pad(x, widths, mode=mode)


def _t(x):
  """``[B, L, H, D] -> [B, H, D, L]``."""
  return jnp.transpose(x, (0, 2, 3, 1))


def _cols(x):
  """``[B, H, L, R] <-> [B, H, R, L]``."""
  return jnp.swapaxes(x, 2, 3)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(cfg, q, k, v, nrow, prow, kmask):
  return _core_fwd(cfg, q, k, v, nrow, prow, kmask)[0]


def _core_fwd(cfg, q, k, v, nrow, prow, kmask):
  kT = _t(k)
  parts = [_cols(nrow)]
  if cfg.moments:
    parts.append(mfwd.moments(cfg, q, kT, kmask))
  if prow is not None:
    parts.append(_cols(prow))
  rows = jnp.concatenate(parts, axis=2)
  out, res = mfwd.attention(cfg, q, kT, v, rows, kmask)
  return out, (q, k, v, nrow, prow, kmask, rows, out, res)


def _core_bwd(cfg, saved, do):
  q, k, v, nrow, prow, kmask, rows, out, res = saved
  # di = do . o per row in f32 from the output as saved (f32 for the ratio
  # mode in low precision: ``pallas.wrapper._core_bwd`` says why).
  di = jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
  di = jnp.transpose(di, (0, 2, 1))[:, :, None]               # [B, H, 1, L]
  brows = jnp.concatenate([res, di], axis=2)
  do = do.astype(v.dtype)
  t = Operands(q, k, v, do, _t(k), _t(v), _t(q), _t(do))
  drows = None
  if cfg.moments:
    _, drows = mbwd.dq_and_rows(cfg, t, rows, brows, None, kmask,
                                with_dq=False)
  dq, dcols = mbwd.dq_and_rows(cfg, t, rows, brows, drows, kmask)
  dk, dv = mbwd.dk_dv(cfg, t, rows, brows, drows, kmask)
  n_stats = 2 if cfg.moments else 0
  dprow = None if prow is None else _cols(
      dcols[:, :, n_stats:n_stats + prow.shape[-1]])
  dprow = prepare.add_scalar_grad(cfg, prow, dprow, _cols(res[:, :, 0:1]),
                                  _cols(res[:, :, 1:2]), _cols(di))
  return dq, dk, dv, jnp.zeros_like(nrow), dprow, None


_core.defvjp(_core_fwd, _core_bwd)


def _per_shard(cfg, query, key, value, prow, kmask):
  b, lq, h, _ = query.shape
  lk = key.shape[1]
  cfg = dataclasses.replace(cfg, lq=lq, lk=lk)
  lqp, lkp = mtile.padded(lq, cfg.bq), mtile.padded(lk, cfg.bk)
  nrow = jnp.broadcast_to(prepare.counts(kmask, b, h, lq, lk, cfg.causal),
                          (b, h, lq, 1))
  mask3 = None if kmask is None else _pad(kmask[:, :, 0, :], 2, lkp)
  out = _core(cfg, _pad(query, 1, lqp), _pad(key, 1, lkp),
              _pad(value, 1, lkp), _pad(nrow, 2, lqp),
              _pad(prow, 2, lqp, "edge"), mask3)
  return out[:, :lq].astype(value.dtype)


def gpu_attention(query, key, value, norm, p, mask, scale, causal,
                  chunk_size=None, query_chunk_size=None, interpret=None,
                  logits_soft_cap=None, local=False):
  """Fused attention on Mosaic GPU; arguments as the Triton wrapper's
  ``gpu_attention``, plus ``logits_soft_cap`` (a float, or None).

  ``chunk_size``/``query_chunk_size``: key/query blocks (multiples of 64;
  default 64). ``interpret``: None runs the kernels when lowering for CUDA
  and Mosaic GPU's interpreter elsewhere. ``local``: ignore the context
  mesh (``gpu/device_check.py``'s small problems run on one device).
  """
  b, lq, h, d = query.shape
  lk, dv = key.shape[1], value.shape[-1]
  forced = (chunk_size, query_chunk_size or chunk_size)
  reason = unsupported_reason(norm, p, d, dv, forced, query.dtype)
  if interpret is False and query.dtype == jnp.float32:
    # f32 (TF32) wgmma takes its second operand K-major only, a transposed
    # SMEM view the interpreter cannot run (``tile.py``); the dispatch
    # (``gpu/backend.py``) sends float32 to Triton.
    reason = ("the Mosaic GPU kernels take bfloat16 or float16 on a GPU "
              "(float32 wgmma wants K-major operands, not written); cast the "
              "inputs or use the Triton kernels (softattn.pallas.gpu.backend)")
  if reason:
    raise ValueError(reason)
  static, names, prow, kmask = prepare.operands(norm, p, mask, (b, h, lq, lk))
  cfg = tile.Config(
      norm=norm, static_params=static, param_names=names, scale=float(scale),
      causal=bool(causal), lq=lq, lk=lk, bq=forced[1] or mtile.BLOCK,
      bk=forced[0] or mtile.BLOCK, has_mask=kmask is not None, chip="gpu",
      interpret=interpret, hp=1, d=d, dv=dv,
      mask_heads=kmask is not None and kmask.shape[1] > 1,
      logits_soft_cap=logits_soft_cap)
  fn = functools.partial(_per_shard, cfg)
  mesh = None if local else prepare.context_mesh()
  if mesh is None:
    return fn(query, key, value, prow, kmask)
  return prepare.sharded(fn, mesh, query, key, value, prow, kmask)
