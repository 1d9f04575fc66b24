"""The GPU backend of the fused kernels, one sub-package per Pallas GPU
lowering: ``triton/`` (Pallas' Triton lowering, what runs today). Mosaic GPU
kernels are to sit beside it (#46), with Triton kept as the fallback for a
jax without Mosaic GPU support; ``softattn/pallas/wrapper.py`` hands a GPU
target here.
"""
