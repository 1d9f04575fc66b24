"""The GPU backend of the fused kernels, one sub-package per Pallas GPU
lowering: ``triton/`` (Pallas' Triton lowering, deprecated by jax; the
default while the Mosaic GPU kernels are unvalidated on a GPU) and
``mosaic/`` (Mosaic GPU, Hopper ``wgmma`` kernels, opt-in until then).
``backend.py`` picks one per call;
``softattn/pallas/wrapper.py`` hands a GPU target there.
"""
