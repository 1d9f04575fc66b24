"""The fused kernels in Pallas' Triton lowering: ``wrapper.py``
(``gpu_attention``: custom VJP, ``shard_map``, ``unsupported_reason``),
``forward.py`` (row moments and the forward kernel), ``backward.py`` (dQ and
dK/dV kernels) and ``tile.py`` (block sizes, masked loads and stores, the
per-tile gradient, what the Triton lowering takes). They compute
``common/tile.py``'s tiles, one head per program.
"""
