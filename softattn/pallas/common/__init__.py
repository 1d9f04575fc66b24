"""What every backend of the fused kernels shares, mode-generic and free of
any lowering: ``tile.py`` (the ``Config`` a kernel is built from, and the
scores, valid mask and normalizer transform on one ``[bq, bk]`` tile, which
the TPU and GPU kernels both compute), ``operands.py`` (the kernels' operand
order, row-cotangent width and output dtype), ``prepare.py`` (arguments and
sharding around the kernels) and ``streams.py`` (sparsemax/entmax15: the
threshold search as passes over the keys, then the fused pointwise kernel).
"""
