"""``pallas_attention``: layout, padding, statistics, custom VJP, shard_map.

Called by ``dot_product_attention(..., implementation="pallas")`` with its
checked arguments. Steps:

1. ``[B, L, H, D]`` -> ``[B, H, L, D]``, lengths padded to whole blocks (the
   kernels mask padded keys and queries by position).
2. The per-row count ``n`` (valid keys per query, from the key mask and the
   causal prefix; no gradient) and any parameter given as an array
   (per head or per batch: it must not vary over keys) become row columns.
3. ``_core`` (a ``custom_vjp``): the moments kernel when the normalizer
   ``needs`` them, the forward kernel; backward: dQ (twice for moments, see
   ``backward.py``) and dK/dV kernels. Parameter cotangents flow back through
   the broadcast of step 2, so learnable parameters train.
4. Under ``jit`` with a mesh set (``jax.set_mesh``/``jax.sharding.use_mesh``)
   the whole thing runs per shard in ``shard_map``: batch over the ``data``
   axis and heads over ``model`` when they divide (softattn's mesh axes);
   Mosaic kernels are not partitioned automatically.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from softattn.chunked import _pad  # same padding as the chunked path
from softattn.pallas import backward, blocks, forward, tile

FUSED_MODES = ("exp", "ratio", "pointwise", "softpick")
ALTERNATIVES = "implementation='dense' (or 'auto')"


def unsupported_reason(norm, mask=None, bias=None) -> str | None:
  """Why the fused kernel cannot run this call, or None when it can."""
  if norm.mode not in FUSED_MODES:
    return (f"normalizer {norm.name!r} has no fused Pallas kernel: its weights "
            f"need the whole sorted or ordered score row (mode "
            f"{norm.mode!r}); use {ALTERNATIVES}")
  if bias is not None:
    return ("implementation='pallas' takes no additive bias; use "
            "implementation='chunked' or 'dense'")
  if mask is not None and mask.shape[2] != 1:
    return ("implementation='pallas' takes a key mask ([batch, heads|1, 1, "
            "k_len]) and is_causal, not a per-query mask; use "
            "implementation='chunked' or 'dense'")
  return None


def _context_mesh():
  mesh = jax.sharding.get_abstract_mesh()
  return None if mesh.empty else mesh


def target_chip() -> tuple[str, bool]:
  """``(generation, is_tpu)`` of the devices this computation is built for:
  the context mesh's devices if a mesh is set (AOT for a TPU topology from a
  CPU host sets one), else the default backend's first device."""
  mesh = _context_mesh()
  device = getattr(mesh, "abstract_device", None) if mesh else None
  if device is None:
    device = jax.devices()[0]
  kind, platform = device.device_kind, device.platform
  return blocks.chip_of_kind(kind), platform == "tpu"


def _split_params(norm, p, shape):
  """Static (hashable) parameters, and array ones as ``[B, H, Lq, 1]``."""
  static, arrays = {}, {}
  b, h, lq, _ = shape
  for k, v in p.items():
    if isinstance(v, (jax.Array, np.ndarray)):
      v = jnp.asarray(v, jnp.float32)
      v4 = v.reshape((1,) * (4 - v.ndim) + v.shape) if v.ndim <= 4 else v
      if v4.ndim != 4 or v4.shape[3] != 1:
        raise ValueError(
            f"{norm.name}: parameter {k!r} of shape {v.shape} varies over "
            f"keys; implementation='pallas' takes parameters per batch, head "
            f"or query ([batch, heads, q_len, 1]); use 'chunked' or 'dense'")
      arrays[k] = jnp.broadcast_to(v4, (b, h, lq, 1))
    else:
      static[k] = v
  return tuple(sorted(static.items())), arrays


def _counts(kmask, b, h, lq, lk, causal):
  """``n`` per query row ``[B|1, H|1, Lq, 1]`` f32: valid keys it sees."""
  if kmask is None:
    if not causal:
      return jnp.full((1, 1, lq, 1), lk, jnp.float32)
    return jnp.minimum(jnp.arange(lq) + 1, lk).astype(jnp.float32)[
        None, None, :, None]
  km = kmask.astype(jnp.float32)[:, :, 0, :lk]              # [Bm, Hm, Lk]
  if not causal:
    return jnp.broadcast_to(jnp.sum(km, -1)[..., None, None],
                            km.shape[:2] + (lq, 1))
  prefix = jnp.cumsum(km, axis=-1)
  last = jnp.minimum(jnp.arange(lq), lk - 1)
  return prefix[:, :, last][..., None]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(cfg, q, k, v, nrow, prow, kmask):
  return _core_fwd(cfg, q, k, v, nrow, prow, kmask)[0]


def _rows(cfg, q, k, nrow, prow, kmask):
  parts = [nrow]
  if cfg.moments:
    parts.append(forward.moments(cfg, q, k, kmask))
  if prow is not None:
    parts.append(prow)
  return jnp.concatenate(parts, axis=-1)


def _core_fwd(cfg, q, k, v, nrow, prow, kmask):
  rows = _rows(cfg, q, k, nrow, prow, kmask)
  out, res = forward.attention(cfg, q, k, v, rows, kmask)
  return out, (q, k, v, nrow, prow, kmask, rows, out, res)


def _core_bwd(cfg, saved, do):
  q, k, v, nrow, prow, kmask, rows, out, res = saved
  # ``out`` is the kernel's f32 output, not the rounded one the caller got:
  # in the ratio modes ``dt = (dp - di) / Z`` and a small ``Z`` turns a
  # bf16-rounded ``o`` in ``di = do . o`` into large gradient errors (with
  # a bf16 output, even with ``modes._pv_split``, bf16 dQ/dK of siren_max and
  # cos_max were 10-20x dense bf16's error; measured). Every mode shares the
  # f32 output: one [Lq, Dv] array, small next to the streamed K/V traffic.
  di = jnp.sum(do * out, axis=-1, keepdims=True)
  do = do.astype(v.dtype)  # the backward matmuls run in the inputs' dtype
  brows = jnp.concatenate([res, di], axis=-1)
  args = (q, k, v, do, rows, brows)
  drows = None
  if cfg.moments:
    _, drows = backward.dq_and_rows(cfg, *args, None, kmask, with_dq=False)
  dq, dcols = backward.dq_and_rows(cfg, *args, drows, kmask)
  dk, dv = backward.dk_dv(cfg, *args, drows, kmask)
  n_stats = 2 if cfg.moments else 0  # diff_names = (mean, var)? + params
  dprow = None if prow is None else dcols[..., n_stats:n_stats + prow.shape[-1]]
  return dq, dk, dv, jnp.zeros_like(nrow), dprow, None


_core.defvjp(_core_fwd, _core_bwd)


def _per_shard(cfg, query, key, value, prow, kmask):
  b, lq, h, d = query.shape
  lk = key.shape[1]
  lq_pad = -(-lq // cfg.bq) * cfg.bq
  lk_pad = -(-lk // cfg.bk) * cfg.bk
  heads = lambda x, n: _pad(jnp.transpose(x, (0, 2, 1, 3)), 2, n, 0)  # noqa: E731
  q, k, v = heads(query, lq_pad), heads(key, lk_pad), heads(value, lk_pad)
  if kmask is not None:
    kmask = _pad(kmask, 3, lk_pad, 0)
  nrow = jnp.broadcast_to(_counts(kmask, b, h, lq, lk, cfg.causal),
                          (b, h, lq, 1))
  # Padded query rows are masked in the kernels; n = 1 and parameters 0 keep
  # their (discarded) transforms finite.
  nrow = _pad(nrow, 2, lq_pad, 1.0)
  if prow is not None:
    prow = _pad(prow, 2, lq_pad, 0.0)
  out = _core(cfg, q, k, v, nrow, prow, kmask)  # f32, see _core_bwd
  return jnp.transpose(out[:, :, :lq], (0, 2, 1, 3)).astype(value.dtype)


def pallas_attention(query, key, value, norm, p, mask, scale, causal,
                     chunk_size=None, query_chunk_size=None, interpret=None):
  """Fused attention; arguments as ``dot_product_attention`` after its checks
  (``mask``: 4-D key mask or None; ``p``: resolved parameters).

  ``chunk_size``/``query_chunk_size`` override the key/query block sizes of
  ``blocks.block_sizes``. ``interpret``: None picks Mosaic when lowering for
  TPU and the Pallas interpreter elsewhere.
  """
  b, lq, h, d = query.shape
  lk, dv = key.shape[1], value.shape[-1]
  chip, _ = target_chip()
  bq, bk = blocks.block_sizes(lq, lk, d, dv, query.dtype, chip)
  bk = chunk_size or bk
  bq = query_chunk_size or chunk_size or bq
  static, arrays = _split_params(norm, p, (b, h, lq, lk))
  names = tuple(sorted(arrays))
  prow = jnp.concatenate([arrays[k] for k in names], -1) if names else None
  kmask = None
  if mask is not None:
    kmask = jnp.broadcast_to(mask, (b, mask.shape[1], 1, lk)).astype(jnp.int32)
  cfg = tile.Config(norm=norm, static_params=static, param_names=names,
                    scale=float(scale), causal=bool(causal), lq=lq, lk=lk,
                    bq=bq, bk=bk, has_mask=kmask is not None, chip=chip,
                    interpret=interpret)
  fn = functools.partial(_per_shard, cfg)
  mesh = _context_mesh()
  if mesh is None:
    return fn(query, key, value, prow, kmask)
  return _sharded(fn, mesh, query, key, value, prow, kmask)


def _axis(mesh, name, size):
  return name if name in mesh.axis_names and size % mesh.shape[name] == 0 \
      else None


def _sharded(fn, mesh, query, key, value, prow, kmask):
  """``fn`` per (batch, head) shard; ``Lq`` and ``Lk`` stay whole."""
  b, _, h, _ = query.shape
  bax, hax = _axis(mesh, "data", b), _axis(mesh, "model", h)
  qkv = P(bax, None, hax, None)
  row = P(bax, hax, None, None)
  mask_spec = None if kmask is None else P(
      bax, hax if kmask.shape[1] > 1 else None, None, None)
  # The per-shard Config holds the shard's lengths, which shard_map keeps.
  return jax.shard_map(
      fn, mesh=mesh,
      in_specs=(qkv, qkv, qkv, None if prow is None else row, mask_spec),
      out_specs=qkv, check_vma=False)(query, key, value, prow, kmask)
