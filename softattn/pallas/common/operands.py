"""What the backends' kernels agree on about their operands, so that a GPU
kernel never reads a TPU module (and the wrappers build one argument list
for either):

* ``unpack``: the backward kernels' input refs in their fixed order;
* ``n_diff``: the width of the row-cotangent output (``Config.diff_names``);
* ``out_dtype``: the forward output's dtype, which the backward's
  ``di = dO . O`` relies on.
"""

from __future__ import annotations

import jax.numpy as jnp

from softattn import modes
from softattn.pallas.common import tile


def unpack(cfg: tile.Config, has_drows: bool, refs):
  """Input refs ``(q, k, v, do, rows, brows, drows, mask)`` of a backward
  kernel (``drows``/``mask`` None when absent) and the rest (its outputs
  and scratch)."""
  q_ref, k_ref, v_ref, do_ref, rows_ref, brows_ref, *rest = refs
  drows_ref = rest.pop(0) if has_drows else None
  mask_ref = rest.pop(0) if cfg.has_mask else None
  return (q_ref, k_ref, v_ref, do_ref, rows_ref, brows_ref, drows_ref,
          mask_ref), rest


def n_diff(cfg: tile.Config) -> int:
  """Columns of the row cotangents: one per ``diff_names`` entry, and one
  dummy column when there are none (a kernel output cannot be empty)."""
  return max(len(cfg.diff_names), 1)


def out_dtype(cfg: tile.Config, dtype):
  """The forward output's dtype: the inputs', except float32 in low
  precision for the modes whose ``w @ v`` is split (``Mode.split_pv``: the
  ratio mode), whose backward needs the unrounded output (see
  ``wrapper._core_bwd``)."""
  if modes.MODES[cfg.mode].split_pv and jnp.dtype(dtype) != jnp.float32:
    return jnp.float32
  return dtype
