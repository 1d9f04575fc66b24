"""The fused kernels on Pallas' Mosaic GPU backend (Hopper): ``wrapper.py``
(``gpu_attention``: padding, transposed operands, custom VJP,
``shard_map``, ``unsupported_reason``), ``forward.py`` (row moments and the
forward kernel), ``backward.py`` (dQ and dK/dV kernels), ``tile.py`` (TMA
streams, ``wgmma`` products, blocks, scores and the per-tile gradient) and
``columns.py`` (the shared ``[b, 1]``-column math as Mosaic GPU vectors).
They compute ``common/tile.py``'s tiles from the mode table, one head and
one warpgroup per program; ``gpu/backend.py`` says when they run.
"""
