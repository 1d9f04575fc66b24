"""The GPU (Triton) kernels: interpreter equals dense, and they lower.

``implementation="pallas"`` is routed to ``softattn.pallas.gpu.triton`` by making
the wrapper see a GPU (``target_platform``); off a GPU the kernels run in
the Pallas interpreter, the same kernel bodies Triton compiles. Inputs,
cases and tolerances are ``tests/test_pallas.py``'s (the TPU tests justify
them; the GPU kernels compute the same tiles in another loop structure):
key mask with a fully masked batch element and cross-attention lengths, or
causal, at lengths that are not multiples of the 16-row blocks (ragged
tails masked, not padded). Every normalizer the GPU kernels support runs
once in f32 (the two cases alternate); one per mode, plus the moments and
array-parameter paths, runs in bf16 on the other case.

Lowering: ``jax.jit(...).trace(...).lower(lowering_platforms=("cuda",))``
runs Pallas' Triton lowering on this CPU host (the kernels become Triton IR
inside ``__gpu$xla.gpu.triton`` custom calls); compiling that IR to PTX
needs a GPU and is not done here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
import numpy as np
import pytest

from softattn import attention, dot_product_attention, pallas
from softattn.modes import MODES
from softattn import normalizers as N
from softattn.pallas.gpu.triton import forward as gpu_forward
from softattn.pallas.gpu.triton import tile as gpu_tile
from softattn.pallas.gpu.triton import wrapper as gpu
from tests import test_pallas as T


@pytest.fixture
def on_gpu(monkeypatch):
  """The wrapper and ``auto`` see a GPU; the kernels still run here, in the
  interpreter (``platform_dependent`` picks it when lowering for CPU)."""
  monkeypatch.setattr(pallas.wrapper, "target_platform", lambda: "gpu")
  monkeypatch.setattr(pallas, "target_platform", lambda: "gpu")


# Head dim 16, not test_pallas' 8: Triton's dot tiles need every dimension
# >= 16 (at 8, bf16 kernels ran on an H200 and returned wrong outputs).
D = 16


def _supported(name):
  norm = N.get(name)
  return gpu.unsupported_reason(norm, norm.resolve(
      T.PARAMS.get(name), head_dim=D), D) is None


GPU_FUSED = [n for n in T.FUSED if _supported(n)]
NO_GPU = [n for n in T.FUSED if not _supported(n)]
# One normalizer per mode, the moments path and array parameters (ssmax's
# scale in the transform, softmax_sink's sink in the mode's finish).
BF16 = ["softmax", "sin_max", "sigmoid", "softpick", "softmax_sink(sink=0.7)",
        "cog", "normsoftmax", "ssmax", "softmax_sink"]
CASE_OF = {n: sorted(T.CASES)[i % 2] for i, n in enumerate(GPU_FUSED)}


def test_every_fused_normalizer_but_erf_ones_runs_on_gpu():
  """Only ``erf`` (which Triton lacks) keeps a one-pass fused normalizer off
  GPU; the streams (sparsemax, entmax15: passes of the TPU kernels;
  stick_breaking: TPU kernels of its own) are refused there with the
  chunked path named."""
  assert set(BF16) <= set(GPU_FUSED)
  assert "laplace" in NO_GPU and len(GPU_FUSED) >= 25
  assert {"sparsemax", "entmax15", "stick_breaking"} <= set(NO_GPU)
  for name in NO_GPU:
    norm = N.get(name)
    reason = gpu.unsupported_reason(norm, norm.resolve(None, head_dim=T.D))
    if norm.mode in MODES:
      assert "lacks erf" in reason, (name, reason)
    else:
      assert "TPU kernels only" in reason and "'chunked'" in reason, reason


@pytest.mark.parametrize("name", GPU_FUSED)
def test_gpu_f32_equals_dense(on_gpu, name):
  case = CASE_OF[name]
  T.check_f32(name, case, T._run("pallas", name, case, jnp.float32, D), D)


@pytest.mark.parametrize("name", BF16)
def test_gpu_bf16_as_accurate_as_dense(on_gpu, name):
  """As ``test_pallas_bf16_as_accurate_as_dense``: within 2x of dense bf16's
  error against f32, plus one bf16 ulp of the array's scale; the case is
  the other one than the f32 test's, so each runs both."""
  case = [c for c in sorted(T.CASES) if c != CASE_OF[name]][0]
  truth = T._dense_f32(name, case, D)
  dense = T._run("dense", name, case, jnp.bfloat16, D)
  got = T._run("pallas", name, case, jnp.bfloat16, D)
  for label, t, d, g in zip(["out", "dq", "dk", "dv", "dparams"], truth,
                            dense, got):
    assert np.all(np.isfinite(g)), label
    scale = 1.0 + float(np.max(np.abs(t)))
    factor = 2.0 if label == "out" else T.BF16_GRAD_FACTOR.get(name, 2.0)
    assert T._err(t, g) <= factor * T._err(t, d) + 2**-8 * scale, (
        label, T._err(t, g), T._err(t, d), scale)


def test_gpu_per_head_key_mask_equals_dense(on_gpu):
  """A key mask that differs per head (the mask's head index in the
  BlockSpec), ragged lengths, a learnable per-head parameter. Both paths at
  full f32 matmul precision: at the default, XLA:GPU and Triton run f32
  dots in TF32 (~1e-3 relative, seen on an H200), which a comparison at f32
  tolerance would mistake for a bug."""
  q, k, v, _ = T._inputs(24, 40, D)
  mask = jax.random.bernoulli(jax.random.PRNGKey(7), 0.6, (T.B, T.H, 1, 40))
  params = {"s_scale": jnp.asarray(T.PARAMS["ssmax"]["s_scale"])}

  def loss(impl, q, k, v, params):
    out = dot_product_attention(q, k, v, normalizer="ssmax", mask=mask,
                                normalizer_params=params,
                                implementation=impl, chunk_size=16)
    return jnp.sum(jnp.cos(out)), out

  results = {}
  for impl in ("dense", "pallas"):
    fn = jax.jit(jax.value_and_grad(lambda *a, impl=impl: loss(impl, *a),
                                    argnums=(0, 1, 2, 3), has_aux=True))
    with jax.default_matmul_precision("highest"):
      (_, out), (dq, dk, dv, dp) = fn(q, k, v, params)
    results[impl] = [out, dq, dk, dv, dp["s_scale"]]
  for a, b in zip(results["pallas"], results["dense"]):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def test_gpu_path_is_the_triton_kernels(on_gpu):
  q, k, v, mask = T._inputs(24, 40, D)
  jaxpr = str(jax.make_jaxpr(lambda q: dot_product_attention(
      q, k, v, normalizer="sigmoid", mask=mask, implementation="pallas"))(q))
  assert "softattn_gpu_forward" in jaxpr and "softattn_forward" not in jaxpr


def test_f32_matmul_precision_follows_jax_setting():
  """Triton runs a DEFAULT-precision f32 dot in TF32 (as XLA's GPU dots);
  under ``jax.default_matmul_precision("highest")`` every dot of the kernels
  asks for IEEE f32 (the kernel is traced in the caller's context)."""
  q = jnp.zeros((1, 32, 1, 16))
  norm = N.get("sigmoid")
  f = lambda q: gpu.gpu_attention(  # noqa: E731
      q, q, q, norm, norm.resolve(None, head_dim=16), None, 0.25, False,
      interpret=False)
  assert "Precision.HIGHEST" not in str(jax.make_jaxpr(f)(q))
  with jax.default_matmul_precision("highest"):
    jaxpr = str(jax.make_jaxpr(f)(q))
  assert jaxpr.count("dot_general") == jaxpr.count(
      "precision=(Precision.HIGHEST, Precision.HIGHEST)") == 2


def test_gpu_refusals_name_the_reason(on_gpu):
  q = jnp.zeros((1, 8, 1, 16))
  with pytest.raises(ValueError, match="Triton lowering lacks erf.*'chunked'"):
    dot_product_attention(q, q, q, normalizer="laplace",
                          implementation="pallas")
  for width in (12, 8):  # not a power of two; below Triton's dot tile
    q_ = jnp.zeros((1, 8, 1, width))
    with pytest.raises(ValueError, match="head dim that is a power of two "
                       "and at least 16"):
      dot_product_attention(q_, q_, q_, implementation="pallas")
  for chunk in (24, 8):  # not a power of two; below Triton's dot tile
    with pytest.raises(ValueError, match="power-of-two block sizes of at "
                       "least 16"):
      dot_product_attention(q, q, q, implementation="pallas",
                            chunk_size=chunk)
  with pytest.raises(ValueError, match="TPU kernels only .*; on GPU use "
                     "implementation='chunked'"):
    dot_product_attention(q, q, q, normalizer="sparsemax",
                          implementation="pallas")


def test_auto_picks_the_gpu_kernels_for_what_they_support(on_gpu):
  def pick(n, shape=(1, 1, 4096, 4096), d=64, dv=None, blocks=(None, None)):
    return attention._auto(N.get(n), shape, d, None, None, False, False,
                           N.get(n).resolve(None, head_dim=d), dv=dv,
                           blocks=blocks)
  assert pick("sigmoid") == "pallas"
  # dense at 196 (faster on the H200), fused at 576 (test_attention's
  # test_gpu_auto_threshold_follows_the_measured_h200_table has the table)
  assert pick("softmax", shape=(1, 1, 576, 576)) == "pallas"
  assert pick("softmax", shape=(1, 1, 196, 196)) == "dense"
  assert pick("laplace") == "chunked"       # erf: XLA
  assert pick("softmax", d=96) == "chunked"  # not a power of two
  assert pick("softmax", dv=96) == "chunked"
  assert pick("softmax", d=8) == "chunked"   # below Triton's dot tile
  # chunk sizes the caller set are the kernels' blocks: auto takes the fused
  # path only where they are valid ones.
  assert pick("softmax", blocks=(64, 32)) == "pallas"
  assert pick("softmax", blocks=(8, None)) == "chunked"
  assert pick("softmax", blocks=(64, 24)) == "chunked"
  assert pick("sparsemax") == "chunked"     # streams; never fused on GPU
  assert pick("sparsemax", shape=(1, 1, 196, 196)) == "dense"


def test_gpu_block_rule():
  """Powers of two >= 16; short sequences take one block of the next power
  of two (tail masked); D = 256 takes smaller blocks."""
  for d in (64, 128, 256):
    for kernel in ("forward", "backward"):
      for length in (49, 196, 4096):
        bq, bk = gpu_tile.block_sizes(length, length, d, kernel)
        assert gpu_tile.is_pow2(bq) and gpu_tile.is_pow2(bk)
        assert 16 <= bq <= max(16, pl.next_power_of_2(length))
  assert gpu_tile.block_sizes(49, 49, 64) == (64, 64)
  assert (np.prod(gpu_tile.block_sizes(4096, 4096, 256))
          < np.prod(gpu_tile.block_sizes(4096, 4096, 128)))
  # bf16 at D <= 128: the 128 x 128 tiles measured fastest on an H200, in
  # both kernels; float32 keeps the smaller starting points.
  for kernel in ("forward", "backward"):
    assert gpu_tile.block_sizes(4096, 4096, 128, kernel) == (128, 128)
    assert gpu_tile.block_sizes(4096, 4096, 128, kernel, jnp.float32) == (
        (128, 64) if kernel == "forward" else (64, 64))
    assert gpu_tile.block_sizes(4096, 4096, 256, kernel) == (
        gpu_tile.block_sizes(4096, 4096, 256, kernel, jnp.float32))


def _cuda_target():
  """Lowering for CUDA on a host without a GPU: newer jax (0.12) asks the
  Triton lowering for the target GPU through an abstract device (it reads
  the compute capability from it); an H100, the GPU this project is lent."""
  device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100",
                                       num_cores=None, platform="gpu")
  try:
    mesh = jax.sharding.AbstractMesh((1,), ("gpu",), abstract_device=device)
  except TypeError:  # older jax: the lowering assumes a default capability
    return contextlib.nullcontext()
  return jax.sharding.use_abstract_mesh(mesh)


def _lower_for_cuda(name, d=64, length=200, causal=False, dtype=jnp.bfloat16):
  """Forward+backward lowered for CUDA; returns the StableHLO text."""
  norm = N.get(name)
  params = {k: jnp.asarray(v) for k, v in T.PARAMS.get(name, {}).items()}
  p = norm.resolve(params, head_dim=d)
  x = jax.ShapeDtypeStruct((2, length, T.H, d), dtype)
  mask = None if causal else jnp.ones((2, 1, 1, length), bool)

  def loss(q, k, v):
    out = gpu.gpu_attention(q, k, v, norm, p, mask, d ** -0.5, causal)
    return jnp.sum(out.astype(jnp.float32))

  with _cuda_target():  # traced and lowered under it: jit keeps the mesh
    traced = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(x, x, x)
    return traced.lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize("name", GPU_FUSED)
def test_every_gpu_kernel_lowers_to_triton(name):
  """Pallas' Triton lowering accepts every kernel of every supported
  normalizer (forward, dQ, dK/dV; moments add two), ragged L = 200 with
  64-row blocks, bf16; the two cases alternate as in the f32 test."""
  hlo = _lower_for_cuda(name, causal=CASE_OF[name] == "causal")
  expected = 5 if N.get(name).needs == "moments" else 3
  assert hlo.count("__gpu$xla.gpu.triton") == expected, name


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_head_dims_lower_to_triton(d, dtype):
  assert _lower_for_cuda("softmax", d=d, length=1000, causal=True,
                         dtype=dtype).count("__gpu$xla.gpu.triton") == 3


def test_erf_does_not_lower_to_triton():
  """The reason laplace stays on XLA, checked against the lowering itself
  (bypassing ``unsupported_reason``)."""
  norm = N.get("laplace")
  cfg = pallas.common.tile.Config(
      norm=norm, static_params=tuple(sorted(
          norm.resolve(None, head_dim=64).items())),
      param_names=(), scale=0.125, causal=False, lq=64, lk=64, bq=64, bk=64,
      has_mask=False, chip="gpu", interpret=False, d=64, dv=64)
  x = jax.ShapeDtypeStruct((1, 64, 1, 64), jnp.bfloat16)
  rows = jax.ShapeDtypeStruct((1, 1, 1, 64), jnp.float32)
  fwd = lambda q, k, v, r: gpu_forward.attention(  # noqa: E731
      cfg, q, k, v, r, None)
  with pytest.raises(NotImplementedError, match="erf"), _cuda_target():
    jax.jit(fwd).trace(x, x, x, rows).lower(lowering_platforms=("cuda",))


def _gpu_benchmark():
  path = os.path.join(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), "benchmarks", "gpu_kernels.py")
  spec = importlib.util.spec_from_file_location("gpu_kernels", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_gpu_benchmark_flags_a_fast_wrong_kernel(monkeypatch):
  """benchmarks/gpu_kernels.py checks every timed path against float32:
  a right one reads at bf16 rounding, one whose output is 5% off (and so
  its gradients) reads as wrong (here on CPU, the XLA paths)."""
  bench = _gpu_benchmark()
  args = ("softmax", "dense", 64, 1, 2, 16, 2)
  ref = bench.reference("softmax", bench._inputs(64, 1, 2, 16))
  right = bench.measure(*args, ref=ref)
  assert right["rel_err"] < 1e-2 and right["grad_rel_err"] < 1e-2, right
  exact = bench._fn
  monkeypatch.setattr(bench, "_fn", lambda *a: (
      lambda q, k, v: exact(*a)(q, k, v) * 1.05))
  wrong = bench.measure(*args, ref=ref)
  assert wrong["rel_err"] > 0.04 and wrong["grad_rel_err"] > 0.04, wrong


def test_gpu_benchmark_launch_sweep_overrides_and_restores():
  """``--launches``: inside ``launch(pair)`` every pallas kernel traced gets
  that Triton (num_warps, num_stages); the module rule is back after, also
  when the timed call raised."""
  bench = _gpu_benchmark()
  rule = gpu_tile.compiler_params(128)
  with bench.launch((4, 3)):
    params = gpu_tile.compiler_params(128)
    assert (params.num_warps, params.num_stages) == (4, 3)
  assert gpu_tile.compiler_params(128) == rule
  with pytest.raises(RuntimeError), bench.launch((2, 1)):
    raise RuntimeError
  assert gpu_tile.compiler_params(128) == rule
  with pytest.raises(SystemExit):
    bench.main(["--launches", "4", "3", "8"])


def test_forward_stages_fit_shared_memory():
  """Three pipeline stages in the forward where three key and value blocks
  and the query block fit the device's shared memory: bf16 128 x 128 at
  D = 128 does on Hopper (the H200 launched it), float32 or 128 x 256 blocks
  do not (four bf16 stages asked for 294,912 bytes there and did not
  launch); without a measured limit (no GPU here) the rule keeps 2."""
  def cfg(bq, bk, d=128):
    return pallas.common.tile.Config(
        norm=N.get("softmax"), static_params=(), param_names=(), scale=1.0,
        causal=False, lq=4096, lk=4096, bq=bq, bk=bk, has_mask=False,
        chip="gpu", interpret=False, d=d, dv=d)
  smem = gpu_tile.HOPPER_SMEM
  assert gpu_tile.forward_stages(cfg(128, 128), jnp.bfloat16, smem) == 3
  assert gpu_tile.forward_stages(cfg(128, 128, 64), jnp.float16, smem) == 3
  assert gpu_tile.forward_stages(cfg(128, 64), jnp.float32, smem) == 2
  assert gpu_tile.forward_stages(cfg(128, 256), jnp.bfloat16, smem) == 2
  assert gpu_tile.forward_stages(cfg(128, 128), jnp.bfloat16, 0) == 2
  if jax.default_backend() != "gpu":
    assert gpu_tile.forward_stages(cfg(128, 128), jnp.bfloat16) == 2
