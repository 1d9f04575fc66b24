"""The GPU backend of the fused kernels, one sub-package per Pallas GPU
lowering: ``triton/`` (Pallas' Triton lowering, deprecated by jax) and
``mosaic/`` (Mosaic GPU, Hopper ``wgmma`` kernels). ``backend.py`` picks
one per call (Mosaic GPU on a Hopper where ``device_check.py``'s one-off
comparison with dense passes on the device); ``softattn/pallas/wrapper.py``
hands a GPU target there.
"""
