"""What every backend of the fused kernels shares, mode-generic and free of
any lowering: ``tile.py`` (the ``Config`` a kernel is built from, and the
scores, valid mask and normalizer transform on one ``[bq, bk]`` tile, which
the TPU and GPU kernels both compute) and ``streams.py`` (sparsemax/entmax15
as passes of whichever fused pointwise kernel ``attend`` runs).
"""
