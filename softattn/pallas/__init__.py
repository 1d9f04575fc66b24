"""Fused TPU attention (Pallas/Mosaic) for every streamable normalizer.

``dot_product_attention(..., implementation="pallas")``. One set of kernels,
generic over the normalizer's declaration (``mode``, ``needs``,
``transform``): the mode picks the accumulator and the backward rule from
``softattn.modes`` (the table the dense and chunked paths run too), the
transform is traced into the kernel and differentiated there with
``jax.vjp``.

* ``wrapper.py``: the entry (``pallas_attention``, ``unsupported_reason``,
  ``target_platform``): layout, padding, ``custom_vjp``, ``shard_map`` of the
  TPU kernels; a GPU target goes to ``gpu/``.
* ``common/``: what the backends share: ``prepare.py`` (parameters as row
  columns, per-row counts, the learnable scalar's gradient, sharding),
  ``tile.py`` (scores, masks and the
  transform on one ``[bq, bk]`` tile), ``streams.py`` (sparsemax/entmax15 as
  passes: the threshold search, then the pointwise kernel),
  ``operands.py`` (the kernels' operand order and output dtype).
* ``tpu/`` (Mosaic TPU): ``forward.py``: statistics and forward kernels;
  ``backward.py``: dQ and dK/dV kernels; ``blocks.py``: block sizes per chip
  (the VMEM rule) and ``pl.CostEstimate``; ``stick.py``: stick-breaking's
  reverse-order forward and dQ kernels (its dK/dV is ``backward.py``'s with
  its own rule); ``threshold.py``: one pass of the sparsemax/entmax15
  threshold search (per-row sums); ``skip.py``: the tables by which their
  weighted pass skips all-zero tiles; ``aot.py``: compile for a TPU
  topology on a CPU host.
* ``gpu/``: a GPU target (``target_platform``) goes to ``gpu/backend.py``,
  which picks the kernels per call: ``gpu/triton/`` (``wrapper.py``,
  ``forward.py``, ``backward.py``, ``tile.py``: the same tiles for Pallas'
  Triton lowering) or ``gpu/mosaic/`` (Mosaic GPU's Hopper ``wgmma``
  kernels, taken on a Hopper where they agree with dense on the device:
  ``gpu/device_check.py``).
"""

from softattn.pallas.tpu.blocks import block_sizes, budget, footprint
from softattn.pallas.wrapper import (
    FUSED_MODES, pallas_attention, target_chip, target_platform,
    unsupported_reason)
