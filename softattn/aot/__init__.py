"""Ahead-of-time compilation for TPU pods on a CPU host: does a config fit, how fast.

  python -m softattn.aot --config=configs/i21k_vit.py:variant=B/16 \
      --topology=v5e-256 [--batch=4096] [--config.compute_dtype=bfloat16]
  python -m softattn.aot table --out=docs/scale.md   # the launch table

compiles the train, eval and diagnostics programs of a config for a TPU
topology with libtpu (``pip install -e '.[tpu-aot]'``), runs nothing, and
reports per-chip HBM from the compiler's buffer assignment, whether it fits,
XLA's FLOPs checked against the analytic count, and the roofline step time,
MFU, images/s and days it implies.

* ``compile``: abstract state/batch/mesh -> compiled programs (``compile_config``);
* ``memory``: what per-chip HBM figure is read and why; out-of-memory results;
* ``flops``: analytic matmul FLOPs from the step's jaxpr;
* ``roofline``: step time, MFU, images/s, days, and the printed report;
* ``datasets``: dataset facts for compiling without the data;
* ``table``: the launch table of every full-scale config (``docs/scale.md``).
"""

from softattn.aot.compile import Compiled, Program, compile_config, compile_program
from softattn.aot.roofline import RooflineEstimate, describe, estimate

__all__ = ["Compiled", "Program", "compile_config", "compile_program",
           "RooflineEstimate", "describe", "estimate"]
