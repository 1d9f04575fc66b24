"""AOT compilation for a TPU topology on this CPU host (softattn.aot).

The two compile tests need libtpu, which the ``test`` extra brings on Linux
x86_64 (tests/libtpu_required.py); the rest is pure Python.
"""

import jax
import jax.numpy as jnp
import pytest

from softattn import topology, xla_cost
from softattn.aot import datasets, flops, memory, roofline
from softattn.data import datasets as data_facts
from softattn.sweep import declaration
from tests import libtpu_required


def test_matmul_flops_counts_dots_convs_scans_and_the_backward():
  x = jnp.zeros((8, 32))
  w = jnp.zeros((32, 16))
  assert flops.matmul_flops(lambda a, b: a @ b, x, w) == 2 * 8 * 32 * 16
  # Batched dot: 4 x (5x6 @ 6x7).
  a, b = jnp.zeros((4, 5, 6)), jnp.zeros((4, 6, 7))
  assert flops.matmul_flops(jnp.matmul, a, b) == 2 * 4 * 5 * 6 * 7
  # 3x3 conv, 3 -> 8 channels, SAME on 10x10, batch 2: 2 x out x (3*3*3).
  img, k = jnp.zeros((2, 10, 10, 3)), jnp.zeros((3, 3, 3, 8))
  conv = lambda i, kk: jax.lax.conv_general_dilated(
      i, kk, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
  assert flops.matmul_flops(conv, img, k) == 2 * (2 * 10 * 10 * 8) * 27
  # A scan body counts once per iteration, inside jit and checkpoint.
  def scanned(h, ws):
    body = jax.checkpoint(lambda c, wi: (jnp.tanh(c @ wi), None))
    return jax.lax.scan(body, h, ws)[0]
  h, ws = jnp.zeros((8, 16)), jnp.zeros((3, 16, 16))
  fwd = flops.matmul_flops(jax.jit(scanned), h, ws)
  assert fwd == 3 * 2 * 8 * 16 * 16
  # Gradient w.r.t. the weights only: forward, recomputed forward (remat),
  # and the two backward matmuls (dh, dw): 4x the forward.
  grad_fn = jax.grad(lambda w_: scanned(h, w_).sum())
  assert flops.matmul_flops(grad_fn, ws) == 4 * fwd
  assert flops.has_remat(jax.make_jaxpr(grad_fn)(ws).jaxpr)
  assert not flops.has_remat(jax.make_jaxpr(jnp.matmul)(a, b).jaxpr)


def test_cost_analysis_is_one_dict_whatever_jax_returns():
  class Fake:
    def __init__(self, cost):
      self.cost = cost

    def cost_analysis(self):
      return self.cost

  one = {"flops": 2.0, "bytes accessed": 8.0}
  for given in (one, [one], (one, {"flops": 1.0})):
    assert xla_cost.cost_analysis(Fake(given)) == one
  for given in (None, [], {}):
    assert xla_cost.cost_analysis(Fake(given)) == {}
  compiled = jax.jit(lambda x: x @ x).lower(jnp.ones((8, 8))).compile()
  assert xla_cost.cost_analysis(compiled)["flops"] > 0


def test_oom_messages_are_parsed_to_the_compilers_figures():
  new = memory.parse_oom(
      "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required "
      "for HLO temporaries (34.01G) exceeds available HBM (15.75G).")
  assert new.used_bytes == pytest.approx(34.01 * 2**30)
  assert new.limit_bytes == pytest.approx(15.75 * 2**30)
  old = memory.parse_oom("RESOURCE_EXHAUSTED: XLA:TPU compile permanent "
                         "error. Ran out of memory in memory space hbm. Used "
                         "17.71G of 15.75G hbm. Exceeded hbm capacity by 1.96G.")
  assert old.used_bytes == pytest.approx(17.71 * 2**30)
  assert memory.parse_oom(ValueError("INVALID_ARGUMENT: shapes")) is None


def test_buffer_assignment_total_is_read_from_the_dump(tmp_path):
  (tmp_path / "module_0001.jit_f.after_optimizations-memory-usage-report.txt"
   ).write_text("Memory Space: default (color=0)\nTotal bytes: 5725394432 "
                "(5.33GiB)\n  ...\nMemory Space: vmem (color=1)\nTotal bytes: "
                "117440512 (112.00MiB)\n")
  assert memory.buffer_assignment_bytes(str(tmp_path)) == 5725394432
  assert memory.buffer_assignment_bytes(str(tmp_path / "none")) is None


def test_offline_dataset_facts_follow_the_config_splits_and_pp():
  assert data_facts.split_size("imagenet21k", "full[51200:]") == 14_145_922
  assert data_facts.split_size("imagenet21k", "full[:51200]") == 51_200
  assert data_facts.split_size("cifar10", "train[:90%]") == 45_000
  cfg = declaration.config_from_file("configs/i21k_vit.py", "variant=B/16")
  info = datasets.dataset_info(cfg.data)
  assert info == dict(num_classes=21843, image_shape=(224, 224, 3),
                      num_train=14_145_922, num_eval=51_200)
  with pytest.raises(ValueError, match="known: cifar10"):
    cfg.data.name = "svhn"
    datasets.dataset_info(cfg.data)


# ----------------------------------------------------------------------------
# Real compiles for a v5e:2x2 slice (4 chips).


def _compile(arg):
  libtpu_required.require_libtpu()
  from softattn import aot  # pylint: disable=g-import-not-at-top
  cfg = declaration.config_from_file("configs/quickstart.py", arg)
  # Dense attention (what `auto` picks for the quickstart's 49 tokens on a
  # TPU too): XLA's own count of the model is checked against the jaxpr's;
  # the kernels' CostEstimate is tested below.
  with cfg.unlocked():
    cfg.model.implementation = "dense"
  return aot.compile_config(cfg, "v5e:2x2", programs=("train",))


def test_small_vit_fits_and_xla_flops_match_the_analytic_count():
  # Wide enough that matmuls dominate (the analytic count has no
  # elementwise ops); one block keeps the compile short.
  c = _compile("width=256,depth=1")
  e = roofline.estimate(c)
  train = c.programs["train"]
  assert train.fits and e.fits
  assert train.hbm_source == "buffer assignment"
  assert 0 < train.hbm_bytes < topology.CHIPS["v5e"].hbm_bytes
  # Batch sharded over 4 chips: per-chip FLOPs x 4 is the global step.
  assert e.flops_ratio == pytest.approx(1.0, abs=0.05)
  assert 0 < e.mfu <= 1 and e.step_seconds > 0 and e.bound in (
      "compute", "HBM", "ICI")
  text = roofline.describe(c)
  assert "verdict: fits" in text and "agrees" in text


def test_oversized_model_is_reported_as_not_fitting():
  # 2.1e9 parameters in float32 with Adam, replicated: ~34 GiB per chip.
  c = _compile("width=16384,depth=1")
  train = c.programs["train"]
  assert not train.fits and not roofline.estimate(c).fits
  assert train.oom.used_bytes > train.oom.limit_bytes > 15 * 2**30
  assert train.hbm_bytes == train.oom.used_bytes
  assert "verdict: does not fit" in roofline.describe(c)


def test_pallas_kernels_count_their_declared_cost_not_one_grid_step():
  """A Pallas kernel's jaxpr is one grid step: the analytic count takes the
  call's CostEstimate (forward 2 matmuls, dQ 3, dK/dV 4 for a pointwise
  normalizer), which is also what XLA's cost analysis counts. Outside the
  kernels the backward's ``di`` is one small matmul (``[L, H*D] x [H*D,
  H]``, ``pallas.wrapper._core_bwd``)."""
  from softattn import dot_product_attention
  q = jnp.ones((1, 128, 2, 64))
  f = lambda q: dot_product_attention(q, q, q, normalizer="sigmoid",
                                      implementation="pallas").sum()
  one = 2 * 128 * 128 * 64 * 2  # 2 x MACs of one [128, 128] x [128, 64] per head
  di = 2 * 128 * (2 * 64) * 2
  assert flops.matmul_flops(jax.grad(f), q) == pytest.approx(9 * one + di)
