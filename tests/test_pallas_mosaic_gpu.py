"""The Mosaic GPU kernels: Mosaic GPU's interpreter equals dense, and the
backend choice.

``implementation="pallas"`` reaches ``softattn.pallas.gpu.mosaic`` when the
wrapper sees a GPU (``target_platform``) that is a Hopper (``backend``'s
device); off a GPU the kernels run in Mosaic GPU's interpret mode
(``InterpretGPUParams``: TMA copies, barriers and ``wgmma`` simulated on the
CPU), the same kernel bodies the hardware would run. Inputs, masks and
tolerances are ``tests/test_pallas.py``'s (a key mask with a fully masked
batch element and cross-attention lengths, or causal; f32 against float64
dense within a few ulps of each array's scale or 2x dense f32's error; bf16
within 2x dense bf16's error plus one bf16 ulp), at head dim 64 (the
kernels' smallest) and lengths that are not multiples of the 64-row blocks
and span two or three of them. Every fused normalizer runs once in f32
(the two mask cases alternate); bf16/f16, a per-head key mask, head dim
256 and the soft cap run on a few (``EXTRA``); one normalizer per mode (and
moments, parameters, substituted primitives) and the other dtypes and head
dims lower through Mosaic GPU for CUDA here. ``auto``'s device check
(``gpu/device_check.py``) runs the interpreted kernels here too, passes
them and fails wrong ones. Each interpreted case takes
~2-4 s on 2 CPU cores, nearly all of it XLA compiling the interpreted
kernels (~2 s) and running their callbacks (~1 s); the file ~75-90 s.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import attention, dot_product_attention, pallas
from softattn import normalizers as N
from softattn.modes import MODES
from softattn.pallas.gpu import backend, device_check
from softattn.pallas.gpu.mosaic import tile as mtile
from softattn.pallas.gpu.mosaic import wrapper as mosaic
from tests import test_pallas as T

D = 64
# (q_len, k_len, key mask?, causal?): two query and three key blocks; two
# ragged blocks each way.
CASES = {"key_mask": (72, 136, True, False), "causal": (100, 100, False, True)}
# A key mask that differs per head (the kernels' mask head index), EXTRA's.
HEAD_MASK = ("head_mask", (72, 136, "heads", False))
# On a Hopper GPU this file runs the kernels themselves (interpret=None:
# ``platform_dependent`` picks them), where float32 goes to Triton; the
# per-normalizer cases then run in bf16 with the bf16 bound.
ON_GPU = jax.default_backend() == "gpu"
H100 = types.SimpleNamespace(device_kind="NVIDIA H100 80GB HBM3",
                             compute_capability="9.0", platform="gpu")


@pytest.fixture
def on_hopper(monkeypatch):
  """The wrapper sees a GPU and the backend a Hopper; the kernels still run
  here, in Mosaic GPU's interpreter (``platform_dependent`` picks it when
  lowering for CPU), float32 included: on hardware float32 goes to Triton
  (``backend.MOSAIC_DTYPES``: a lowering limit of f32 ``wgmma``), but the
  interpreter checks the kernels' math tightest there."""
  monkeypatch.setattr(pallas.wrapper, "target_platform", lambda: "gpu")
  monkeypatch.setattr(pallas, "target_platform", lambda: "gpu")
  monkeypatch.setattr(backend, "_target_device", lambda: H100)
  # Forced: ``auto`` would ask for the device check, which needs a real
  # GPU device (``test_auto_runs_the_device_check_inside_a_traced_step``).
  monkeypatch.setenv(backend.ENV, "mosaic")
  if not ON_GPU:
    monkeypatch.setattr(backend, "MOSAIC_DTYPES", None)


def _takes(name):
  norm = N.get(name)
  return norm.mode in MODES and mosaic.unsupported_reason(
      norm, norm.resolve(T.PARAMS.get(name), head_dim=D), D) is None


FUSED = [n for n in T.FUSED if _takes(n)]
CASE_OF = {n: sorted(CASES)[i % 2] for i, n in enumerate(FUSED)}
# (normalizer, dtype, case, head dim, soft cap): the variations on a few.
EXTRA = [("softmax", "bfloat16", "head_mask", D, None),
         ("softmax_sink", "float16", "causal", D, None),   # array sink, f16
         ("sigmoid", "float32", "causal", 256, None),
         ("softmax", "float32", "key_mask", D, 2.0),        # exp + cap
         ("normsoftmax", "float32", "causal", D, 3.0)]      # moments + cap


def _run(impl, name, case, dtype, d=D, cap=None):
  """Output and the gradients of ``sum(cos(out))`` w.r.t. q, k, v and the
  array parameters (as ``test_pallas._run``, on this file's cases)."""
  lq, lk, use_mask, causal = dict([HEAD_MASK], **CASES)[case]
  q, k, v, mask = (jnp.asarray(x) for x in T._inputs_np(lq, lk, d))
  if use_mask == "heads":
    mask = jax.random.bernoulli(jax.random.PRNGKey(7), 0.6, (T.B, T.H, 1, lk))
  q, k, v = (x.astype(dtype) for x in (q, k, v))
  return T.grads_of(q, k, v, name, mask=mask if use_mask else None,
                    is_causal=causal, implementation=impl,
                    logits_soft_cap=cap)


def _check_f32(name, case, got, d=D, cap=None):
  """``test_pallas.check_f32`` on this file's cases."""
  with jax.enable_x64(True):
    truth = _run("dense", name, case, jnp.float64, d, cap)
  dense = _run("dense", name, case, jnp.float32, d, cap)
  for label, t, r, g in zip(["out", "dq", "dk", "dv", "dparams"], truth,
                            dense, got):
    assert np.all(np.isfinite(g)), label
    scale = 1.0 + float(np.max(np.abs(t)))
    tol = T.F32_TOL.get(name, 2e-5)
    assert T._err(t, g) <= max(tol * scale, 2 * T._err(t, r)), (
        label, T._err(t, g), T._err(t, r), scale)


def _check_low(name, case, dtype, got, d=D, cap=None):
  """``test_pallas_gpu``'s bf16 bound, for bf16 and f16."""
  truth = _run("dense", name, case, jnp.float32, d, cap)
  dense = _run("dense", name, case, dtype, d, cap)
  ulp = 2**-8 if jnp.dtype(dtype) == jnp.bfloat16 else 2**-11
  for label, t, r, g in zip(["out", "dq", "dk", "dv", "dparams"], truth,
                            dense, got):
    assert np.all(np.isfinite(g)), label
    scale = 1.0 + float(np.max(np.abs(t)))
    factor = 2.0 if label == "out" else T.BF16_GRAD_FACTOR.get(name, 2.0)
    assert T._err(t, g) <= factor * T._err(t, r) + ulp * scale, (
        label, T._err(t, g), T._err(t, r), scale)


def test_every_fused_normalizer_runs_on_mosaic():
  """Every normalizer with a mode of the table (erf included: Mosaic GPU
  lowers it, so laplace fuses here and not on Triton)."""
  assert "laplace" in FUSED and len(FUSED) >= 26
  assert {"sparsemax", "entmax15", "stick_breaking"}.isdisjoint(FUSED)


@pytest.mark.parametrize("name", FUSED)
def test_mosaic_f32_equals_dense(on_hopper, name):
  case = CASE_OF[name]
  if ON_GPU:
    _check_low(name, case, jnp.bfloat16,
               _run("pallas", name, case, jnp.bfloat16))
  else:
    _check_f32(name, case, _run("pallas", name, case, jnp.float32))


@pytest.mark.parametrize("name,dtype,case,d,cap", EXTRA)
def test_mosaic_variations_equal_dense(on_hopper, name, dtype, case, d, cap):
  got = _run("pallas", name, case, dtype, d, cap)
  if dtype == "float32":
    _check_f32(name, case, got, d, cap)
  else:
    _check_low(name, case, dtype, got, d, cap)


def test_soft_cap_none_leaves_the_program_unchanged(on_hopper):
  q = jnp.zeros((1, 64, 1, 64), jnp.bfloat16)

  def jaxpr(cap):
    return str(jax.make_jaxpr(lambda q: dot_product_attention(
        q, q, q, implementation="pallas", logits_soft_cap=cap))(q))
  plain = jaxpr(None)
  assert "softattn_mgpu_forward" in plain and "tanh" not in plain
  assert "tanh" in jaxpr(5.0)


def test_backend_choice(monkeypatch):
  """Where Mosaic GPU can run a call (Hopper, the API, a call it takes,
  bf16/f16), ``auto`` takes it once validated on a GPU or once jax drops
  Triton, ``mosaic`` always; Triton for any other GPU, a jax lacking a
  construct, a refused call (``why_not_mosaic`` says which)."""
  choose = lambda *a, **k: backend.choose(*a, prefer="mosaic", **k)  # noqa: E731
  assert choose((), "NVIDIA H100 80GB HBM3") == "mosaic"
  assert choose((), "NVIDIA H200") == "mosaic"
  assert choose((), "NVIDIA GH200 480GB") == "mosaic"
  assert choose((), "gpu", compute_capability="9.0") == "mosaic"
  assert choose((), "NVIDIA H100", dtype=jnp.bfloat16) == "mosaic"
  for kind in ("NVIDIA A100-SXM4-80GB", "NVIDIA B200", "NVIDIA L4",
               "Tesla V100-SXM2-16GB", "cpu", "TPU v5 lite"):
    assert choose((), kind) == "triton", kind
    assert "need a Hopper GPU" in backend.why_not_mosaic((), kind)
  auto = lambda *a, **k: backend.choose(*a, prefer="auto", **k)  # noqa: E731
  assert auto((), "NVIDIA H100", compute_capability="8.0") == "triton"
  assert auto(("wgmma",), "NVIDIA H100") == "triton"
  assert auto((), "NVIDIA H100", mosaic_reason="head dim") == "triton"
  assert auto((), "NVIDIA H100", dtype=jnp.float32) == "triton"
  assert choose(("wgmma",), "NVIDIA H100") == "triton"
  assert "lacks wgmma; upgrade jax" in backend.why_not_mosaic(
      ("wgmma",), "NVIDIA H100")
  # auto on Hopper, with no device check to run (an abstract target):
  # Triton while the Mosaic GPU kernels are unvalidated and jax ships
  # Triton; Mosaic once either changes.
  assert not backend.MOSAIC_VALIDATED
  assert auto((), "NVIDIA H100", dtype=jnp.bfloat16) == "triton"
  monkeypatch.setattr(backend, "MOSAIC_VALIDATED", True)
  assert auto((), "NVIDIA H100", dtype=jnp.bfloat16) == "mosaic"
  monkeypatch.setattr(backend, "MOSAIC_VALIDATED", False)
  monkeypatch.setattr(backend, "triton_available", lambda: False)
  assert auto((), "NVIDIA H100", dtype=jnp.bfloat16) == "mosaic"
  assert backend.choose((), "NVIDIA H100", prefer="triton") == "triton"
  monkeypatch.setenv(backend.ENV, "cuda")
  with pytest.raises(ValueError, match="use one of auto, mosaic, triton"):
    backend.choose((), "NVIDIA H100")
  assert mtile.missing_api() == ()  # both CI jax versions have it


def test_auto_takes_mosaic_only_where_its_device_check_passes(monkeypatch):
  """Unvalidated and with Triton shipped, ``auto`` takes Mosaic GPU where
  the device check passes, Triton where it fails or cannot run (AOT)."""
  auto = lambda *a, **k: backend.choose(*a, prefer="auto", **k)  # noqa: E731
  calls = []

  def check(verdict):
    return lambda: calls.append(verdict) or verdict
  assert auto((), "NVIDIA H100", dtype=jnp.bfloat16, check=check(None)) == (
      "mosaic")
  assert auto((), "NVIDIA H100", dtype=jnp.bfloat16,
              check=check("dq off by 1")) == "triton"
  assert auto((), "NVIDIA H100", dtype=jnp.bfloat16, check=None) == "triton"
  # Not asked where Mosaic cannot run the call, or is forced either way.
  assert auto((), "NVIDIA A100", dtype=jnp.bfloat16, check=check(0)) == (
      "triton")
  assert backend.choose((), "NVIDIA H100", prefer="mosaic",
                        check=check(1)) == "mosaic"
  assert calls == [None, "dq off by 1"]
  # A real CPU device, or an abstract one, is no device to check on.
  assert backend._device_check(jax.devices()[0], N.get("softmax"), {}, D, D,
                               None, jnp.bfloat16, None) is None


def _kind(name, dtype="bfloat16", cap=None):
  norm = N.get(name)
  params = {k: jnp.asarray(v) for k, v in T.PARAMS.get(name, {}).items()}
  return norm, device_check.kind_of(norm, norm.resolve(params, head_dim=D),
                                    D, D, None, dtype, cap)


def test_device_check_passes_the_kernels_and_catches_wrong_ones():
  """``device_check.compare``: the kernels (interpreted here) within the
  bound, for an array parameter and a soft cap too; a path whose output,
  or only whose dQ, is 10 % off (a kernel bug is off by more), fails,
  naming what differed."""
  mosaic_attend = lambda *a: mosaic.gpu_attention(  # noqa: E731
      *a[:11], logits_soft_cap=a[11], local=True)
  for name, cap in (("softmax_sink", None), ("normsoftmax", 3.0)):
    norm, kind = _kind(name, "float16", cap)
    assert device_check.compare(norm, kind, mosaic_attend) is None, name

  def dense(q, k, v, norm, p, mask, scale, causal, *_):
    return dot_product_attention(q, k, v, normalizer=norm,
                                 normalizer_params=p, mask=mask, scale=scale,
                                 is_causal=causal, implementation="dense")

  def off(q, k, v, *a):  # the output 10 % off
    return dense(q, k, v, *a) * 1.1

  @jax.custom_vjp
  def grad_off(q, k, v):  # the output right, dQ 10 % off
    return q, k, v

  grad_off.defvjp(lambda q, k, v: ((q, k, v), None),
                  lambda _, g: (g[0] * 1.1, g[1], g[2]))
  norm, kind = _kind("softmax")
  assert device_check.compare(norm, kind, dense) is None
  assert device_check.compare(norm, kind, off).startswith("out off by")
  assert device_check.compare(
      norm, kind, lambda q, k, v, *a: dense(*grad_off(q, k, v), *a)
  ).startswith("dq off by")


def test_device_check_failure_is_a_reason_once_logged(monkeypatch, caplog):
  """A kernel that raises (a lowering or compile error on the chip) is a
  reason to keep Triton, logged as a warning, and checked once per kind and
  device in a process."""
  calls = []

  def broken(*a, **k):
    calls.append(1)
    raise RuntimeError("Mosaic GPU lowering failed\nat line 3")
  monkeypatch.setattr(mosaic, "gpu_attention", broken)
  monkeypatch.setattr(device_check, "VERDICTS", {})
  norm, kind = _kind("sigmoid")
  with caplog.at_level("WARNING"):
    why = device_check.failure(norm, kind, "NVIDIA H100")
  assert why == "RuntimeError: Mosaic GPU lowering failed"
  assert "running the Triton kernels instead" in caplog.text
  assert device_check.failure(norm, kind, "NVIDIA H100") == why
  assert len(calls) == 1


def test_auto_runs_the_device_check_inside_a_traced_step(on_hopper,
                                                        monkeypatch):
  """Through ``dot_product_attention``, traced under jit: the check (the
  kernels interpreted here, in a thread of its own) passes, so Mosaic GPU
  runs, laplace included (``auto`` fuses it: Mosaic lowers ``erf``); where
  it fails, Triton runs, and ``auto`` leaves laplace to the XLA paths."""
  monkeypatch.setenv(backend.ENV, "auto")
  monkeypatch.setattr(backend, "_can_check", lambda device: True)
  monkeypatch.setattr(device_check, "VERDICTS", {})
  # Short enough to interpret quickly; auto's GPU length threshold (tested
  # in test_attention) is not what this test is about.
  monkeypatch.setattr(attention, "AUTO_PALLAS_MIN_SCORES_GPU", 0)
  q = jnp.asarray(T._inputs_np(144, 144, D)[0], jnp.bfloat16)

  def jaxpr(name, impl):
    return str(jax.make_jaxpr(jax.jit(lambda x: dot_product_attention(
        x, x, x, normalizer=name, implementation=impl)))(q))
  assert "softattn_mgpu_forward" in jaxpr("laplace", "auto")
  assert [k.name for k, _, _ in device_check.VERDICTS] == ["laplace"]
  for kind in device_check.VERDICTS:
    device_check.VERDICTS[kind] = "out off by 1"
  assert "softattn_mgpu_forward" not in jaxpr("laplace", "auto")
  monkeypatch.setattr(device_check, "VERDICTS", {
      (_kind("softmax")[1], H100.device_kind, None): "out off by 1"})
  assert "softattn_gpu_forward" in jaxpr("softmax", "pallas")


def test_dispatch_follows_the_device(on_hopper, monkeypatch):
  q, _, _, mask = T._inputs_np(72, 72, D)
  q = jnp.asarray(q, jnp.bfloat16)  # float32 would go to Triton on a GPU

  def jaxpr(d=D):
    x = q[..., :d] if d <= D else jnp.concatenate([q] * (d // D), -1)
    return str(jax.make_jaxpr(lambda x: dot_product_attention(
        x, x, x, mask=mask, implementation="pallas"))(x))
  assert "softattn_mgpu_forward" in jaxpr()
  assert "softattn_gpu_forward" in jaxpr(16)    # Mosaic refuses; Triton
  monkeypatch.setattr(backend, "_target_device", lambda: types.SimpleNamespace(
      device_kind="NVIDIA A100-SXM4-80GB", compute_capability="8.0"))
  assert "softattn_gpu_forward" in jaxpr()


def test_refusals_name_the_fix():
  norm = N.get("softmax")
  assert "64, 128 or 256" in mosaic.unsupported_reason(norm, d=96)
  for chunk in (32, 192, 512):
    assert "block sizes of 64, 128 or 256" in mosaic.unsupported_reason(
        norm, blocks=(chunk, None))
  assert "float32, bfloat16 or float16" in mosaic.unsupported_reason(
      norm, dtype=jnp.float64)
  assert "TPU kernels only" in mosaic.unsupported_reason(N.get("sparsemax"))
  with pytest.raises(ValueError, match="64, 128 or 256.*'chunked'"):
    mosaic.gpu_attention(jnp.zeros((1, 8, 1, 32)), jnp.zeros((1, 8, 1, 32)),
                         jnp.zeros((1, 8, 1, 32)), norm, {}, None, 1.0, False)


def _lower_for_cuda(name, dtype=jnp.bfloat16, d=D, causal=False, cap=None,
                    blocks=(None, None)):
  """Forward+backward lowered for CUDA on this host (Mosaic GPU's lowering
  runs here; compiling its output needs a GPU); the StableHLO text."""
  norm = N.get(name)
  params = {k: jnp.asarray(v) for k, v in T.PARAMS.get(name, {}).items()}
  p = norm.resolve(params, head_dim=d)
  x = jax.ShapeDtypeStruct((2, 200, T.H, d), dtype)
  mask = None if causal else jnp.ones((2, 1, 1, 200), bool)

  def loss(q, k, v):
    out = mosaic.gpu_attention(q, k, v, norm, p, mask, d ** -0.5, causal,
                               *blocks, interpret=False, logits_soft_cap=cap)
    return jnp.sum(out.astype(jnp.float32))

  traced = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(x, x, x)
  return traced.lower(lowering_platforms=("cuda",)).as_text()


# One normalizer per mode, moments, array parameters (in the transform, and
# softmax_sink's in the mode's finish) and the substituted primitives
# (normsoftmax: sqrt; laplace: pow, erf; lssa: log1p).
LOWERED = ["softmax", "sin_max", "sigmoid", "softpick", "cog", "softmax_sink",
           "normsoftmax", "ssmax", "laplace", "lssa"]


@pytest.mark.parametrize("name", LOWERED)
def test_kernels_lower_for_hopper(name):
  """Mosaic GPU's lowering takes every kernel (forward, dQ, dK/dV; moments
  add two) at bf16, D = 64, ragged L = 200 in 64-row blocks; the two mask
  cases alternate."""
  hlo = _lower_for_cuda(name, causal=LOWERED.index(name) % 2 == 1)
  kernels = 5 if N.get(name).needs == "moments" else 3
  assert hlo.count("softattn_mgpu_") >= kernels, name


@pytest.mark.parametrize("dtype,d", [(jnp.bfloat16, 128), (jnp.float16, 256)])
def test_dtypes_and_head_dims_lower_for_hopper(dtype, d):
  assert "softattn_mgpu_dkv" in _lower_for_cuda("softmax", dtype, d,
                                                causal=True, cap=5.0)


def test_larger_blocks_lower_for_hopper():
  assert "softattn_mgpu_dkv" in _lower_for_cuda("softmax", blocks=(256, 128))


def test_float32_is_refused_on_hardware_with_the_fix():
  with pytest.raises(ValueError, match="bfloat16 or float16 on a GPU"):
    _lower_for_cuda("softmax", jnp.float32)


def test_backend_reason_follows_the_choice(on_hopper, monkeypatch):
  """What ``auto`` would ask: laplace (``erf``) fuses where Mosaic runs it
  (Hopper, bf16) and is refused where Triton would (float32, other GPUs)."""
  monkeypatch.setattr(backend, "MOSAIC_DTYPES", ("bfloat16", "float16"))
  laplace = N.get("laplace")
  p = laplace.resolve(None, head_dim=D)
  assert backend.unsupported_reason(laplace, p, dtype=jnp.bfloat16) is None
  assert "lacks erf" in backend.unsupported_reason(laplace, p,
                                                   dtype=jnp.float32)
  monkeypatch.setattr(backend, "_target_device", lambda: types.SimpleNamespace(
      device_kind="NVIDIA A100-SXM4-80GB"))
  assert "lacks erf" in backend.unsupported_reason(laplace, p,
                                                   dtype=jnp.bfloat16)


def test_columns_keep_row_values_as_vectors_or_refuse_in_one_line():
  """``columns.run``: a ``[b, 1]`` column against a tile is the broadcast
  vector; an op it cannot keep as a vector is one line naming the way
  around it, not a traceback from the lowering."""
  from softattn.pallas.gpu.mosaic import columns  # noqa: PLC0415
  x, tile_ = jnp.arange(4.0), jnp.ones((4, 3))
  (got,) = jax.tree.leaves(columns.run(lambda c, t: c * t,
                                       columns.Col(x), tile_))
  np.testing.assert_array_equal(got, x[:, None] * tile_)
  with pytest.raises(ValueError, match="SOFTATTN_GPU_KERNELS=triton"):
    columns.run(jnp.transpose, columns.Col(x))
