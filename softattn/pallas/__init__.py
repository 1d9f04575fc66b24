"""Fused TPU attention (Pallas/Mosaic) for every streamable normalizer.

``dot_product_attention(..., implementation="pallas")``. One set of kernels,
generic over the normalizer's declaration (``mode``, ``needs``,
``transform``): the mode picks the accumulator and the backward rule from
``softattn.modes`` (the table the dense and chunked paths run too), the
transform is traced into the kernel and differentiated there with
``jax.vjp``.

* ``tile.py``: scores, masks and the transform on one ``[bq, bk]`` tile.
* ``forward.py``: statistics and forward kernels; ``backward.py``: dQ and
  dK/dV kernels; ``blocks.py``: block sizes per chip (the VMEM rule) and
  ``pl.CostEstimate``; ``wrapper.py``: layout, padding, ``custom_vjp``,
  ``shard_map``.
* ``streams.py``: sparsemax/entmax15 as passes of the pointwise kernel;
  ``stick.py``: stick-breaking's reverse-order forward and dQ kernels (its
  dK/dV is ``backward.py``'s with its own rule).
* ``gpu.py``, ``gpu_forward.py``, ``gpu_backward.py``, ``gpu_tile.py``: the
  same tiles in kernels for Pallas' Triton lowering, which
  ``pallas_attention`` runs when the target is a GPU (``target_platform``).
"""

from softattn.pallas.blocks import block_sizes, chip, footprint
from softattn.pallas.wrapper import (
    FUSED_MODES, pallas_attention, target_chip, target_platform,
    unsupported_reason)
