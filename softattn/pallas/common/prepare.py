"""What the TPU and GPU wrappers share: the arguments as the kernels take
them and the sharding around them.

* ``split_params``: a normalizer's parameters split into static ones (in the
  kernel's config) and per-row arrays (``[B, H, Lq, 1]`` row columns);
  ``operands``: those and the key mask as the kernels take them;
* ``counts``: each query row's ``n`` (valid keys it sees) from the key mask
  and the causal prefix;
* ``add_scalar_grad``: the learnable scalar's cotangent (``Mode.scalar_grad``),
  which the kernels' own VJP does not give;
* ``context_mesh`` / ``sharded``: the computation per (batch, head) shard
  under the caller's mesh.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from softattn.modes import MODES


def context_mesh():
  mesh = jax.sharding.get_abstract_mesh()
  return None if mesh.empty else mesh


def is_row_param(value) -> bool:
  """Whether a resolved parameter is an array (concrete or traced), which
  the kernels read as per-row columns, rather than a static number."""
  return isinstance(value, (jax.Array, np.ndarray))


def split_params(norm, p, shape):
  """Static (hashable) parameters, and array ones as ``[B, H, Lq, 1]``."""
  static, arrays = {}, {}
  b, h, lq, _ = shape
  for k, v in p.items():
    if is_row_param(v):
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


def operands(norm, p, mask, shape):
  """What every wrapper hands its kernels: the static parameters, the array
  parameters' names, their row columns concatenated (``[B, H, Lq, n]`` or
  None) and the key mask as int32 ``[B, 1|H, 1, Lk]`` (or None)."""
  b, h, lq, lk = shape
  static, arrays = split_params(norm, p, shape)
  names = tuple(sorted(arrays))
  prow = jnp.concatenate([arrays[k] for k in names], -1) if names else None
  kmask = None
  if mask is not None:
    kmask = jnp.broadcast_to(mask, (b, mask.shape[1], 1, lk)).astype(jnp.int32)
  return static, names, prow, kmask


def counts(kmask, b, h, lq, lk, causal):
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


def add_scalar_grad(cfg, prow, dprow, res_a, res_b, di):
  """``dprow`` with the cotangent of the mode's scalar added to its column
  when that scalar is a row column (a learnable sink; ``Mode.scalar_grad``).
  The kernels' own VJP gives it nothing (the transform does not read it):
  it lives in ``finish``, and the mode derives it per row from the forward's
  residuals and ``di`` (``[B, H, Lq, 1]`` each), with no extra pass."""
  if not cfg.scalar_is_row:
    return dprow
  i = cfg.param_names.index(cfg.norm.eps_param)
  col = MODES[cfg.mode].scalar_grad(prow[..., i:i + 1], res_a, res_b, di)
  return dprow.at[..., i:i + 1].add(col)


def axis(mesh, name, size):
  return name if name in mesh.axis_names and size % mesh.shape[name] == 0 \
      else None


def sharded(fn, mesh, query, key, value, prow, kmask, *per_head):
  """``fn`` per (batch, head) shard; ``Lq`` and ``Lk`` stay whole.
  ``per_head``: more ``[B, H, ...]`` arrays, split as the rows are (the
  TPU threshold streams' live tiles)."""
  b, _, h, _ = query.shape
  bax, hax = axis(mesh, "data", b), axis(mesh, "model", h)
  qkv = P(bax, None, hax, None)
  row = P(bax, hax, None, None)
  mask_spec = None if kmask is None else P(
      bax, hax if kmask.shape[1] > 1 else None, None, None)
  # The per-shard Config holds the shard's lengths, which shard_map keeps.
  return jax.shard_map(
      fn, mesh=mesh,
      in_specs=(qkv, qkv, qkv, None if prow is None else row, mask_spec)
      + (row,) * len(per_head),
      out_specs=qkv, check_vma=False)(query, key, value, prow, kmask,
                                      *per_head)
