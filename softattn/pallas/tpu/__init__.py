"""The TPU backend of the fused kernels (Pallas' Mosaic TPU lowering):
``forward.py`` (row statistics and the forward kernel), ``backward.py``
(dQ and dK/dV kernels), ``stick.py`` (stick-breaking's reverse-order
kernels), ``threshold.py`` (one pass of the sparsemax/entmax threshold
search), ``skip.py`` (the table of all-zero tiles the threshold streams'
weighted pass skips), ``blocks.py`` (block sizes and VMEM budget per TPU
generation, ``pl.CostEstimate``) and ``aot.py`` (compile for a TPU topology
on a CPU host: ``python -m softattn.pallas.tpu.aot``).
``softattn/pallas/wrapper.py`` runs them.
"""
