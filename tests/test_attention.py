"""dot_product_attention: dense == chunked == linear, parity with jax.nn, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import attention as A
from softattn import dot_product_attention
from softattn import normalizers as N

# Paths compared at f32 tolerance: full-precision f32 matmuls on any backend
# (tests/conftest.py says why).
pytestmark = pytest.mark.usefixtures("full_f32_matmuls")

B, LQ, LK, H, D = 2, 37, 29, 3, 8     # lengths not multiples of the chunks
CHUNK, QCHUNK = 8, 5
LEARNABLE = {"normsoftmax_learnable": {"w": 1.3}, "ssmax": {"s_scale": 0.7},
             "nap": {"g": 0.8, "b": 0.1}, "consmax": {"beta": 0.5, "denom": 3.0},
             "lssar": {"power": 3.0}, "softmax_sink": {"sink": 0.4}}
STREAMABLE = [n for n in N.names() if n != "prenorm" and N.get(n).streamable]
STREAMABLE += ["prenorm(softmax)", "prenorm(sin2_max_shifted)",
               "prenorm(normsoftmax(gamma=sqrt_d))", "normsoftmax(gamma=sqrt_d)",
               "relu_seqlen(alpha=0.5, act=gelu)", "sin_softmax(post_scale=0.5)"]
# g/sum(g) with g of both signs (or near a pole) is ill-conditioned: float32
# results legitimately differ with the summation order, so these are compared
# in float64, where the two paths must agree to 1e-9.
ILL_CONDITIONED = {"sin_max", "cos_max", "siren_max"}
# Unnormalised weights that grow fast with the score (consmax's exp(s)/gamma,
# polynomial's s^3/sqrt(n)) give outputs of size ~10-100 here, where the test
# loss sum(o cos o) has gradients cos o - o sin o: float32 summation order
# alone moves them by ~1e-5 relative. Same float64 comparison.
ILL_CONDITIONED |= {"consmax", "polynomial"}


def _qkv(seed, lq=LQ, lk=LK, dtype=jnp.float32):
  ks = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(ks[0], (B, lq, H, D), dtype),
          jax.random.normal(ks[1], (B, lk, H, D), dtype),
          jax.random.normal(ks[2], (B, lk, H, D), dtype))


def _masks(lq, lk):
  rng = np.random.default_rng(0)
  full = rng.random((B, 1, lq, lk)) < 0.8
  full[0, 0, 3] = False                 # a fully masked query row
  key_only = rng.random((B, 1, 1, lk)) < 0.8
  return {"none": (None, False), "full": (full, False),
          "key_only": (key_only, False), "causal+key": (key_only, True)}


def _run(impl, q, k, v, normalizer, mask, causal, params=None, bias=None):
  def loss(q, k, v, params):
    o = dot_product_attention(
        q, k, v, normalizer=normalizer, normalizer_params=params, mask=mask,
        bias=bias, is_causal=causal, implementation=impl, chunk_size=CHUNK,
        query_chunk_size=QCHUNK)
    return jnp.sum(o * jnp.cos(o)), o
  # One jit per call: compiling the whole step once is much cheaper than
  # dispatching the scans eagerly.
  (_, out), grads = jax.jit(jax.value_and_grad(
      loss, argnums=(0, 1, 2, 3), has_aux=True))(q, k, v, params)
  return out, grads


def _rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)


def _assert_paths_agree(name, mask_kind, dtype, tol):
  lq = LK if mask_kind == "causal+key" else LQ
  q, k, v = _qkv(1, lq=lq, dtype=dtype)
  mask, causal = _masks(lq, LK)[mask_kind]
  base = name.split("(")[0]
  params = {p: jnp.asarray(x, dtype) for p, x in LEARNABLE.get(base, {}).items()}
  out_d, g_d = _run("dense", q, k, v, name, mask, causal, params or None)
  out_c, g_c = _run("chunked", q, k, v, name, mask, causal, params or None)
  assert np.all(np.isfinite(out_d))
  errs = [_rel(out_d, out_c)] + [_rel(a, b) for a, b in zip(g_d[:3], g_c[:3])]
  assert max(errs) <= tol, (name, mask_kind, errs)
  # A learnable parameter's gradient is one scalar summed over every score, so
  # float32 cancellation allows it 10x the tolerance.
  for a, b in zip(jax.tree.leaves(g_d[3]), jax.tree.leaves(g_c[3])):
    assert _rel(a, b) <= 10 * tol, (name, mask_kind)


# One normalizer per streaming mode / statistics kind sees every mask kind; all
# see the general per-query mask (the case that exercises every code path of
# the streaming statistics).
PER_MODE = ["softmax", "normsoftmax", "relu_seqlen", "sin2_max_shifted",
            "softpick", "sin_softmax(post_scale=0.5)", "prenorm(softmax)",
            "sigmoid"]
CASES = [(n, "full") for n in STREAMABLE] + [
    (n, kind) for n in PER_MODE for kind in ("none", "key_only", "causal+key")]


@pytest.mark.parametrize("name,mask_kind", CASES)
def test_dense_equals_chunked(name, mask_kind):
  if name in ILL_CONDITIONED:
    with jax.enable_x64(True):
      _assert_paths_agree(name, mask_kind, jnp.float64, 1e-9)
  else:
    _assert_paths_agree(name, mask_kind, jnp.float32, 1e-5)


def test_chunked_with_bias_and_cross_lengths():
  q, k, v = _qkv(2)
  bias = jax.random.normal(jax.random.PRNGKey(3), (1, H, LQ, LK))
  for name in ("softmax", "normsoftmax", "relu_seqlen"):
    out_d, g_d = _run("dense", q, k, v, name, None, False, bias=bias)
    out_c, g_c = _run("chunked", q, k, v, name, None, False, bias=bias)
    assert _rel(out_d, out_c) <= 1e-5
    for a, b in zip(g_d[:3], g_c[:3]):
      assert _rel(a, b) <= 1e-5


@pytest.mark.parametrize("name", ["scaled", "relu_seqlen(act=identity)",
                                  "relu_seqlen(alpha=0.5, act='identity')"])
@pytest.mark.parametrize("mask_kind", ["none", "key_only"])
def test_dense_equals_linear_equals_chunked(name, mask_kind):
  q, k, v = _qkv(4)
  mask, causal = _masks(LQ, LK)[mask_kind]
  out_d, g_d = _run("dense", q, k, v, name, mask, causal)
  for impl in ("linear", "chunked"):
    out, g = _run(impl, q, k, v, name, mask, causal)
    assert _rel(out_d, out) <= 1e-5, impl
    for a, b in zip(g_d[:3], g[:3]):
      assert _rel(a, b) <= 1e-5, impl


@pytest.mark.parametrize("mask_kind", ["none", "full", "causal+key"])
def test_softmax_matches_jax_nn(mask_kind):
  lq = LK if mask_kind == "causal+key" else LQ
  q, k, v = _qkv(5, lq=lq)
  mask, causal = _masks(lq, LK)[mask_kind]
  bias = 0.1 * jax.random.normal(jax.random.PRNGKey(6), (1, H, lq, LK))
  if mask is not None:  # jax.nn gives fully masked rows the mean of v
    mask = mask.copy()
    mask[..., 0] = True
  want = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask,
                                      is_causal=causal)
  for impl in ("dense", "chunked", "auto"):
    got = dot_product_attention(q, k, v, bias=bias, mask=mask, is_causal=causal,
                                implementation=impl, chunk_size=CHUNK)
    assert _rel(want, got) <= 1e-5, impl


def test_return_weights_and_fully_masked_rows():
  q, k, v = _qkv(7)
  mask, _ = _masks(LQ, LK)["full"]
  out, w = dot_product_attention(q, k, v, mask=mask, return_weights=True)
  assert w.shape == (B, H, LQ, LK)
  np.testing.assert_array_equal(np.asarray(w)[np.broadcast_to(~mask, w.shape)],
                                0.0)
  np.testing.assert_array_equal(out[0, 3], 0.0)  # row 3 of batch 0 is empty
  for impl in ("dense", "chunked"):
    o = dot_product_attention(q, k, v, mask=mask, implementation=impl,
                              chunk_size=CHUNK)
    assert np.all(np.isfinite(o))


def test_bfloat16_inputs():
  q, k, v = _qkv(8)
  ref = dot_product_attention(q, k, v, normalizer="normsoftmax")
  for impl in ("dense", "chunked"):
    out = dot_product_attention(*(x.astype(jnp.bfloat16) for x in (q, k, v)),
                                normalizer="normsoftmax", implementation=impl,
                                chunk_size=CHUNK)
    assert out.dtype == jnp.bfloat16
    assert _rel(ref, out) < 3e-2, impl


def test_bfloat16_jitted_linear_path():
  # XLA:CPU has no bf16 x bf16 -> f32 dot thunk for these shapes; the linear
  # path must not ask for one.
  q = jax.random.normal(jax.random.PRNGKey(12), (2, 36, 2, 4), jnp.bfloat16)
  f = lambda q: dot_product_attention(  # noqa: E731
      q, q, q, normalizer="scaled", implementation="linear")
  assert jax.jit(f)(q).dtype == jnp.bfloat16
  g = jax.jit(jax.grad(lambda q: jnp.sum(f(q).astype(jnp.float32))))(q)
  assert np.all(np.isfinite(np.asarray(g, np.float32)))


def test_default_scale_follows_the_normalizer():
  q, k, v = _qkv(9)
  # NormSoftmax drops 1/sqrt(d) (the paper feeds raw q.k): with a finite gamma
  # the scale matters, and the default must equal scale=1.
  nsm = "normsoftmax(gamma=0.5)"
  np.testing.assert_allclose(
      dot_product_attention(q, k, v, normalizer=nsm),
      dot_product_attention(q, k, v, normalizer=nsm, scale=1.0), rtol=1e-6)
  np.testing.assert_allclose(
      dot_product_attention(q, k, v),
      dot_product_attention(q, k, v, scale=D ** -0.5), rtol=1e-6)


def test_auto_rule(monkeypatch):
  """The rule off TPU and GPU (their kernels: test_pallas, test_pallas_gpu),
  on any host: the target platform reads as a CPU."""
  from softattn import pallas  # noqa: PLC0415
  monkeypatch.setattr(pallas, "target_platform", lambda: "cpu")
  monkeypatch.setattr(pallas, "target_chip", lambda: ("cpu", False))
  shape = (8, 8, 4096, 4096)
  key_mask = np.ones((8, 1, 1, 4096), bool)
  pick = lambda n, **kw: A._auto(N.get(n), kw.pop("shape", shape), 64,  # noqa
                                 kw.get("mask"), None, kw.get("causal", False),
                                 False)
  assert pick("scaled") == "linear"
  assert pick("scaled", mask=key_mask) == "linear"
  assert pick("scaled", causal=True) == "chunked"
  assert pick("scaled", shape=(1, 1, 16, 16)) == "dense"   # n < d: quadratic wins
  assert pick("softmax") == "chunked"                     # long sequences
  assert pick("softmax", shape=(2, 2, 256, 256)) == "dense"
  assert pick("softmax", shape=(4096, 12, 197, 197)) == "dense"  # big batch
  assert pick("sparsemax") == "chunked"                   # streams in passes
  assert pick("sparsemax", shape=(2, 2, 256, 256)) == "dense"


def test_gpu_auto_threshold_follows_the_measured_h200_table(monkeypatch):
  """Issue #46: at the ViT lengths ``auto`` picks whichever of fused and
  dense was faster on the H200 (the committed runs, read by
  benchmarks/gpu_auto_rule.py): the threshold lies in the range they
  allow, and ``_auto`` on a GPU target picks per the table's winners."""
  import importlib.util  # noqa: PLC0415
  import os  # noqa: PLC0415

  from softattn import pallas  # noqa: PLC0415
  path = os.path.join(os.path.dirname(__file__), "..", "benchmarks",
                      "gpu_auto_rule.py")
  spec = importlib.util.spec_from_file_location("gpu_auto_rule", path)
  rule = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(rule)
  won = rule.winners(rule.times())
  assert {196, 576, 1024} <= {length for length, _ in won}
  low, high = rule.allowed(won)
  assert low <= A.AUTO_PALLAS_MIN_SCORES_GPU < high, (low, high)
  monkeypatch.setattr(pallas, "target_platform", lambda: "gpu")
  monkeypatch.setattr(pallas, "target_chip", lambda: ("cpu", False))
  for (length, name), w in won.items():
    norm = N.get(name)
    got = A._auto(norm, (4, 16, length, length), 128, None, None, False,
                  False, norm.resolve(head_dim=128), dv=128,
                  dtype=jnp.bfloat16)
    assert got == w or w == "tie", (length, name, got, w)


def test_chunked_memory_is_a_fraction_of_dense():
  """XLA's buffer plan (no execution): O(L * chunk) vs O(L^2), fwd + bwd."""
  l, chunk = 2048, 128
  q = jax.ShapeDtypeStruct((1, l, 2, 16), jnp.float32)

  def temp_bytes(impl):
    f = lambda q, k, v: jnp.sum(dot_product_attention(  # noqa: E731
        q, k, v, implementation=impl, chunk_size=chunk))
    compiled = jax.jit(jax.grad(f, argnums=(0, 1, 2))).lower(q, q, q).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  dense, chunked = temp_bytes("dense"), temp_bytes("chunked")
  assert dense >= 2 * l * l * 2 * 4          # at least the scores, twice
  assert chunked * 8 <= dense, (chunked, dense)


# --- bad input ------------------------------------------------------------------
def test_errors_are_clear():
  q, k, v = _qkv(10)
  with pytest.raises(ValueError, match="unknown normalizer 'nope'; valid names"):
    dot_product_attention(q, k, v, normalizer="nope")
  with pytest.raises(ValueError, match=r"query \(2, 37, 3, 8\) and key \(2, 29, 3, 4\)"):
    dot_product_attention(q, k[..., :4], v)
  with pytest.raises(ValueError, match=r"key \(2, 29, 3, 8\) and value \(2, 28, 3, 8\)"):
    dot_product_attention(q, k, v[:, :28])
  with pytest.raises(ValueError, match=r"query must be \[batch, length, heads, head_dim\], got shape \(37, 3, 8\)"):
    dot_product_attention(q[0], k, v)
  with pytest.raises(ValueError, match=r"mask shape \(1, 1, 1, 5\) does not broadcast"):
    dot_product_attention(q, k, v, mask=np.ones(5, bool))
  with pytest.raises(ValueError, match="not linear in the scores"):
    dot_product_attention(q, k, v, normalizer="relu_seqlen", implementation="linear")
  with pytest.raises(ValueError, match="key-only mask"):
    dot_product_attention(q, k, v, normalizer="scaled", implementation="linear",
                          mask=_masks(LQ, LK)["full"][0])
  with pytest.raises(ValueError, match="unknown implementation 'flash'"):
    dot_product_attention(q, k, v, implementation="flash")
  with pytest.raises(ValueError, match="return_weights=True needs"):
    dot_product_attention(q, k, v, implementation="chunked", return_weights=True)
