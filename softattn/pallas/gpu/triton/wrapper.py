"""``gpu_attention``: the fused kernels on GPU (Pallas' Triton lowering).

``dot_product_attention(..., implementation="pallas")`` lands here when the
computation is built for a GPU (``wrapper.target_platform``). The steps are
the TPU wrapper's (``softattn/pallas/wrapper.py``): per-row counts and array
parameters as row columns (``common/prepare.py``: ``counts``, ``split_params``), a
``custom_vjp`` whose forward runs the moments kernel (when the normalizer
``needs`` them) and the attention kernel, and whose backward runs dQ (twice
for moments) and dK/dV; ``shard_map`` under a context mesh. What differs:
the GPU kernels (``forward.py``, ``backward.py`` here) read ``[B, L, H, D]``
as it is, one head per program, and their blocks follow
``gpu_tile.block_sizes``.

Supported (``unsupported_reason``): what the TPU kernels take, head dims that
are powers of two and at least 16 (Triton tiles; 64/128/256 are), block
sizes that are too, and normalizers whose tile math the Triton lowering has
rules for -- ``erf`` has none, so ``laplace`` (and GELU with
``approximate=False``) stay on XLA (``auto`` falls back; forcing ``pallas``
names the reason). Mosaic GPU lowers ``erf`` but targets Hopper-only
warpgroup kernels with a different programming model; it is not used here.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from softattn.modes import MODES
from softattn.pallas.common import prepare, tile
from softattn.pallas.gpu.triton import backward as gpu_backward
from softattn.pallas.gpu.triton import forward as gpu_forward
from softattn.pallas.gpu.triton import tile as gpu_tile

ALTERNATIVES = "implementation='chunked' or 'dense' (or 'auto')"


def _is_array(v):
  return isinstance(v, (jax.Array, np.ndarray))


def unsupported_reason(norm, params=None, d: int = 64, dv: int | None = None,
                       blocks=None) -> str | None:
  """Why the GPU kernels cannot run this normalizer (beyond the TPU
  wrapper's reasons), or None. ``blocks``: forced ``(bq, bk)``; a None
  entry is left to ``gpu_tile.block_sizes``."""
  if norm.mode not in MODES:  # threshold passes, stick-breaking scan
    return (f"normalizer {norm.name!r} fuses on the TPU kernels only "
            f"(several passes, or stick-breaking's reverse scan); on GPU use "
            f"implementation='chunked' (it streams there)")
  for name, width in (("head dim", d), ("value head dim", dv or d)):
    if not gpu_tile.is_pow2(width) or width < gpu_tile.MIN_BLOCK:
      return (f"implementation='pallas' on GPU needs a {name} that is a power "
              f"of two and at least {gpu_tile.MIN_BLOCK} (Triton's dot "
              f"tiles), got {width}; use {ALTERNATIVES}")
  # The same tile rule as the head dims: a forced 8-row block would put 8 on
  # a dot dimension (the weights-times-values dot contracts over the key
  # block), the shape that ran wrong in bf16.
  forced = [b for b in blocks or () if b]
  if not all(gpu_tile.is_pow2(b) and b >= gpu_tile.MIN_BLOCK for b in forced):
    return (f"implementation='pallas' on GPU needs power-of-two block sizes "
            f"of at least {gpu_tile.MIN_BLOCK}, got chunk sizes {forced}; "
            f"use {ALTERNATIVES}")
  p = dict(params or {})
  static = {k: v for k, v in p.items() if not _is_array(v)}
  cfg = tile.Config(norm=norm, static_params=tuple(sorted(static.items())),
                    param_names=tuple(sorted(set(p) - set(static))),
                    scale=1.0, causal=False, lq=16, lk=16, bq=16, bk=16,
                    has_mask=False, chip="gpu", interpret=True, d=d,
                    dv=dv or d)
  missing = gpu_tile.missing_primitives(cfg)
  if missing:
    return (f"normalizer {norm.name!r} has no GPU kernel: Pallas' Triton "
            f"lowering lacks {', '.join(missing)}; use {ALTERNATIVES}")
  return None


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(cfgs, q, k, v, nrow, prow, kmask):
  return _core_fwd(cfgs, q, k, v, nrow, prow, kmask)[0]


def _rows(cfg, q, k, nrow, prow, kmask):
  """``[B, H, R, Lq]`` f32: the count, the moments, array parameters."""
  parts = [jnp.swapaxes(nrow, 2, 3)]
  if cfg.moments:
    parts.append(gpu_forward.moments(cfg, q, k, kmask))
  if prow is not None:
    parts.append(jnp.swapaxes(prow, 2, 3))
  return jnp.concatenate(parts, axis=2)


def _core_fwd(cfgs, q, k, v, nrow, prow, kmask):
  cfg, _ = cfgs
  rows = _rows(cfg, q, k, nrow, prow, kmask)
  out, res = gpu_forward.attention(cfg, q, k, v, rows, kmask)
  return out, (q, k, v, nrow, prow, kmask, rows, out, res)


def _core_bwd(cfgs, saved, do):
  _, cfg = cfgs
  q, k, v, nrow, prow, kmask, rows, out, res = saved
  # di = do . o per row in f32, from the output as saved (f32 for the ratio
  # mode in low precision: ``wrapper._core_bwd`` says why).
  di = jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
  brows = jnp.concatenate([res, jnp.transpose(di, (0, 2, 1))[:, :, None]],
                          axis=2)
  do = do.astype(v.dtype)
  args = (q, k, v, do, rows, brows)
  drows = None
  if cfg.moments:
    _, drows = gpu_backward.dq_and_rows(cfg, *args, None, kmask,
                                        with_dq=False)
  dq, dcols = gpu_backward.dq_and_rows(cfg, *args, drows, kmask)
  dk, dv = gpu_backward.dk_dv(cfg, *args, drows, kmask)
  n_stats = 2 if cfg.moments else 0
  dprow = None if prow is None else jnp.swapaxes(
      dcols[:, :, n_stats:n_stats + prow.shape[-1]], 2, 3)
  col = lambda x: jnp.swapaxes(x, 2, 3)  # noqa: E731  [B, H, 1, Lq] -> Lq, 1
  dprow = prepare.add_scalar_grad(cfg, prow, dprow, col(res[:, :, 0:1]),
                                  col(res[:, :, 1:2]), col(brows[:, :, 2:3]))
  return dq, dk, dv, jnp.zeros_like(nrow), dprow, None


_core.defvjp(_core_fwd, _core_bwd)


def _per_shard(cfgs, query, key, value, prow, kmask):
  b, lq, h, _ = query.shape
  lk = key.shape[1]
  cfgs = tuple(dataclasses.replace(c, lq=lq, lk=lk) for c in cfgs)
  nrow = jnp.broadcast_to(prepare.counts(kmask, b, h, lq, lk, cfgs[0].causal),
                          (b, h, lq, 1))
  mask3 = None if kmask is None else kmask[:, :, 0, :]
  out = _core(cfgs, query, key, value, nrow, prow, mask3)
  return out.astype(value.dtype)


def gpu_attention(query, key, value, norm, p, mask, scale, causal,
                  chunk_size=None, query_chunk_size=None, interpret=None,
                  logits_soft_cap=None):
  """Fused attention on GPU; arguments as ``wrapper.pallas_attention``.

  ``chunk_size``/``query_chunk_size`` override both kernels' key/query
  blocks (powers of two). ``interpret``: None picks Triton when lowering for
  CUDA and the Pallas interpreter elsewhere.
  """
  b, lq, h, d = query.shape
  lk, dv = key.shape[1], value.shape[-1]
  forced = (chunk_size, query_chunk_size or chunk_size)
  reason = unsupported_reason(norm, p, d, dv, forced)
  if reason:
    raise ValueError(reason)
  static, names, prow, kmask = prepare.operands(norm, p, mask, (b, h, lq, lk))
  cfgs = []
  for kernel in ("forward", "backward"):
    bq, bk = gpu_tile.block_sizes(lq, lk, d, kernel, query.dtype)
    bk = forced[0] or bk
    bq = forced[1] or bq
    cfgs.append(tile.Config(
        norm=norm, static_params=static, param_names=names,
        scale=float(scale), causal=bool(causal), lq=lq, lk=lk, bq=bq, bk=bk,
        has_mask=kmask is not None, chip="gpu", interpret=interpret, hp=1,
        d=d, dv=dv, mask_heads=kmask is not None and kmask.shape[1] > 1,
        logits_soft_cap=logits_soft_cap))
  fn = functools.partial(_per_shard, tuple(cfgs))
  mesh = prepare.context_mesh()
  if mesh is None:
    return fn(query, key, value, prow, kmask)
  return prepare.sharded(fn, mesh, query, key, value, prow, kmask)
