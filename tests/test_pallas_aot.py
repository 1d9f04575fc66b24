"""The fused kernels compile for TPU v4, v5e, v5p and v6e (AOT on this CPU).

Mosaic really runs here: an unsupported layout or a block that overflows VMEM
fails the compile. Shapes are realistic (B=8, H=12, L=4096, bf16), forward
and backward, sharded over a 2x2 (data, model) mesh through shard_map.

What is compiled where: the kernel code is one per *mode* (the normalizer only
changes the elementwise transform traced into it), while the block sizes, and
so the VMEM footprint and the Mosaic layouts, change with the chip and the head
dim. So every chip compiles softmax at D=64 and 128 (causal and key mask);
v5e compiles one normalizer per mode and the moments and array-parameter
paths; v4, the smallest VMEM (16 MiB), compiles D=256 with moments, the
largest footprint. Each chip runs in its own process (libtpu needs its
environment before jax starts); about 1.5 minutes in all on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from softattn import normalizers
from softattn.pallas.tpu.aot import ENV
from tests import libtpu_required

B, H, L = 8, 12, 4096
EVERY_CHIP = [dict(d=64, causal=True), dict(d=128, key_mask=True)]
EXTRA = {
    "v5e": [dict(normalizer="sigmoid", key_mask=True),          # pointwise
            dict(normalizer="taylor_softmax", causal=True),     # ratio
            dict(normalizer="softpick", key_mask=True),         # softpick
            dict(normalizer="normsoftmax", causal=True),        # exp+moments
            dict(normalizer="ssmax", learnable=["s_scale"], key_mask=True),
            # gpt-oss's learnable sink per head: a row column read at the
            # forward's finish (L=1024: the kernel code, not the size).
            dict(length=1024, normalizer="softmax_sink", learnable=["sink"],
                 causal=True, key_mask=True),
            # Ragged lengths, two 64-wide heads per block: ViT-B/16's 196
            # tokens (one whole-length block) and 2000 (ragged q and k tails).
            dict(length=196, d=64, key_mask=True),
            # float32 at the default matmul precision: the kernels read
            # bfloat16 q, k, v (pallas.wrapper.operand_dtype).
            dict(length=196, d=64, dtype="float32"),
            dict(length=2000, d=64, causal=True, normalizer="sigmoid"),
            # sparsemax's threshold search: passes of its own kernel and of
            # the pointwise one (softattn/pallas/common/streams.py), 12 Mosaic
            # kernels with the backward. Mosaic's compile time grows with the block, which
            # grows with L (~140 s at 4096): L=256 (~10 s) checks the
            # lowering of every pass, not the production block.
            dict(b=4, h=4, length=256, normalizer="sparsemax",
                 key_mask=True),
            # Stick-breaking's own kernels (pallas/tpu/stick.py): reversed key
            # axis, triangular-matmul scans, per-block carries; ragged, hp=2.
            dict(length=2000, d=64, causal=True, normalizer="stick_breaking")],
    "v4": [dict(normalizer="nap", d=256, key_mask=True),        # moments, D=256
           dict(length=196, d=64, key_mask=True),
           # Mega's Laplace function: erf inside the kernel (Triton lacks it;
           # Mosaic TPU lowers it). L=1024: the op, not the size, is tested.
           dict(length=1024, normalizer="laplace", key_mask=True),
           # The exp_sink and signed_exp modes (their own kernel code).
           dict(length=1024, normalizer="softmax_1", key_mask=True),
           dict(length=1024, normalizer="cog", causal=True),
           # LSSA's log-softplus (log1p, log, doubled wheres) with the
           # row count n under a causal mask.
           dict(length=1024, normalizer="lssa", causal=True),
           # entmax15's passes ([z - tau]_+^2 and its Newton sums), as
           # sparsemax's on v5e, on the smallest VMEM.
           dict(b=4, h=4, length=256, normalizer="entmax15", causal=True),
           # Stick-breaking with moments (three backward kernels).
           dict(length=1024, normalizer="prenorm(stick_breaking)",
                key_mask=True)],
}


def _compile(chip, configs):
  libtpu_required.require_libtpu()
  env = {**os.environ, **ENV}
  proc = subprocess.run(
      [sys.executable, "-m", "softattn.pallas.tpu.aot", "--chip", chip,
       "--configs", json.dumps(configs)],
      env=env, capture_output=True, text=True, timeout=600)
  lines = [json.loads(x) for x in proc.stdout.splitlines()
           if x.startswith("{")]
  assert len(lines) == len(configs), proc.stderr[-3000:]
  return lines


@pytest.mark.parametrize("chip", ["v4", "v5e", "v5p", "v6e"])
def test_pallas_compiles_for_tpu(chip):
  configs = [{"b": B, "h": H, "length": L, "d": 128, **c}
             for c in EVERY_CHIP + EXTRA.get(chip, [])]
  for cfg, res in zip(configs, _compile(chip, configs)):
    assert res["ok"], (cfg, res.get("error"))
    # What the kernels read: bf16 for bf16 and, on a TPU, for float32; the
    # threshold streams' row-sum passes also read float32 ones as values.
    norm = normalizers.get(cfg.get("normalizer", "softmax"))
    stream = getattr(norm.stream, "alpha", None) is not None
    assert res["kernel_operand_dtypes"] == (["bf16", "f32"] if stream else
                                            ["bf16"]), (cfg, res)
    # XLA cannot see inside a Mosaic kernel: these FLOPs come from the
    # kernels' pl.CostEstimate (blocks.KERNEL_MATMULS): forward 2, dQ 3 and
    # dK/dV 4 matmuls of width D per (query, key) pair, 2 FLOPs each, per
    # device (batch and heads split over the 2x2 mesh), causal halves.
    n = cfg["length"]
    pairs = cfg["b"] * cfg["h"] * n * n / 4 / (2 if cfg.get("causal") else 1)
    assert res["flops"] >= 2 * pairs * cfg["d"] * 9, (cfg, res)
    if "stick_breaking" in cfg.get("normalizer", ""):
      # ... plus its scans: 128-lane triangular matmuls in two bf16 pieces,
      # one forward, two in each backward kernel (pallas/tpu/stick.py).
      assert res["flops"] >= 2 * pairs * (cfg["d"] * 9 + 128 * 2 * 5), res
