"""Skipping the tiles whose weights are all zero (the threshold streams'
weighted pass, ``common/streams.py``).

The caller knows, per (batch, head, query block, key block), whether a tile
can have a nonzero weight (``live``): for ``[z - tau]_+^p`` a tile is dead
when every valid ``z`` of every row is at or below that row's ``tau``, and
then it adds exactly 0 to the output, and (weight and derivative both 0) to
dQ, dK, dV and tau's cotangent. The kernels take that as a scalar-prefetch
table in SMEM (``pltpu.PrefetchScalarGridSpec``, as jax's splash attention
takes its block mask), one int32 per grid step, ``[B, H/hp, n_outer,
n_inner]`` over the grid's last two axes (``inner``: the streamed one):

* ``inner`` where the tile is live: it is computed;
* ``-1 - f`` where it is dead: the compute is skipped (``pl.when``) and the
  streamed blocks' index maps read block ``f`` instead of ``inner``: the
  last live block before it in that row of the grid (the first live one
  after it for leading dead tiles; 0 in a row with none). Pallas fetches a
  block only when its index changes between grid steps, so a dead tile
  costs no DMA either (splash's trick).

Nothing here runs for any other normalizer: without a table the kernels are
built as before (no prefetch, the same index maps and bodies).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def fetch_table(live):
  """The int32 table (module docstring) of a bool ``live [..., n_inner]``
  whose last axis is the grid's streamed one."""
  n = live.shape[-1]
  j = jnp.arange(n, dtype=jnp.int32)
  last = jax.lax.cummax(jnp.where(live, j, -1), axis=live.ndim - 1)
  first = jnp.argmax(live, axis=-1, keepdims=True).astype(jnp.int32)
  fetch = jnp.where(last >= 0, last, first)  # first: 0 when none is live
  return jnp.where(live, j, -1 - fetch).astype(jnp.int32)


def tables(live, hp: int):
  """``(by_query, by_key)`` fetch tables of a per-head ``live [B, H, nq,
  nk]`` for grids walking key blocks inside query blocks (forward, dQ) and
  query blocks inside key blocks (dK/dV); a block of ``hp`` heads is live
  where any of its heads is."""
  b, h, nq, nk = live.shape
  grouped = jnp.any(live.reshape(b, h // hp, hp, nq, nk), axis=2)
  return fetch_table(grouped), fetch_table(jnp.swapaxes(grouped, 2, 3))


def _block(index):
  """The block a table entry makes the streamed axis read."""
  return jnp.maximum(index, -1 - index)


def _repointed(spec):
  """``spec`` reading the table's block on the streamed (last) grid axis."""
  index = spec.index_map
  return pl.BlockSpec(spec.block_shape, lambda b, g, i, j, table: index(
      b, g, i, _block(table[b, g, i, j])))


def call_args(table, grid, in_specs, out_specs, scratch_shapes):
  """``pl.pallas_call`` keywords for the grid: as given without a table,
  else a scalar-prefetch grid spec whose index maps follow the table (the
  kernel then gets the table's ref first)."""
  if table is None:
    return dict(grid=grid, in_specs=in_specs, out_specs=out_specs,
                scratch_shapes=scratch_shapes)
  out = jax.tree.map(_repointed, out_specs,
                     is_leaf=lambda x: isinstance(x, pl.BlockSpec))
  return dict(grid_spec=pltpu.PrefetchScalarGridSpec(
      num_scalar_prefetch=1, grid=grid,
      in_specs=[_repointed(s) for s in in_specs], out_specs=out,
      scratch_shapes=scratch_shapes))


def split(skip: bool, refs):
  """``(table ref or None, the kernel's other refs)``."""
  return (refs[0], refs[1:]) if skip else (None, refs)


def computes(needed, table_ref):
  """Whether this grid step computes its tile: ``needed`` (the causal
  rule, ``tile.needed``), and live in the table when there is one."""
  if table_ref is None:
    return needed
  ids = tuple(pl.program_id(a) for a in range(4))
  live = table_ref[ids] >= 0
  return live if needed is True else jnp.logical_and(needed, live)
