"""MultiHeadAttention: normalizers, learnable parameters, qk-LN, gate, sow."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn.nn import MultiHeadAttention, attention_diagnostics
from softattn.nn.diagnostics import QUANTILES, jacobian_diagonal
from softattn import normalizers as norms

DIAG_KEYS = {"score_std", "attn_entropy", "grad_saturation",
             *(f"{p}_q{q:02d}" for p in ("score", "lgrad") for q in QUANTILES)}

X = jnp.asarray(np.random.RandomState(0).randn(2, 6, 16), jnp.float32)


def test_softmax_matches_flax_attention_with_same_parameters():
  ours = MultiHeadAttention(num_heads=4)
  v = ours.init(jax.random.key(0), X)
  ref = nn.MultiHeadDotProductAttention(num_heads=4)
  np.testing.assert_allclose(ours.apply(v, X), ref.apply(v, X, X), rtol=1e-5,
                             atol=1e-5)


def test_qk_layernorm_and_gate_parameters():
  m = MultiHeadAttention(num_heads=4, qk_layernorm=True, gated=True)
  p = m.init(jax.random.key(0), X)["params"]
  assert p["query_ln"]["scale"].shape == (4,)  # per head_dim, no bias
  assert "bias" not in p["key_ln"]
  assert p["gate"]["kernel"].shape == (16, 4, 4)
  y = m.apply({"params": p}, X)
  assert y.shape == X.shape


def test_learnable_normalizer_parameters_are_used():
  m = MultiHeadAttention(num_heads=2, normalizer="normsoftmax_learnable")
  p = m.init(jax.random.key(0), X)["params"]
  assert p["norm_w"].shape == () and float(p["norm_w"]) == 1.0
  y1 = m.apply({"params": p}, X)
  p2 = {**p, "norm_w": jnp.asarray(3.0)}
  y2 = m.apply({"params": p2}, X)
  assert float(jnp.abs(y1 - y2).max()) > 1e-4
  g = jax.grad(lambda p: m.apply({"params": p}, X).sum())(p)
  assert float(jnp.abs(g["norm_w"])) > 0
  m = MultiHeadAttention(num_heads=2, normalizer="ssmax",
                         learnable_init={"s_scale": 0.5})
  p = m.init(jax.random.key(0), X)["params"]
  np.testing.assert_allclose(p["norm_s_scale"], np.full((2, 1, 1), 0.5))
  # nap learns g and b per head unless the spec fixes them.
  p = MultiHeadAttention(num_heads=2, normalizer="nap(g=2.0)").init(
      jax.random.key(0), X)["params"]
  assert "norm_g" not in p and p["norm_b"].shape == (2, 1, 1)


@pytest.mark.usefixtures("full_f32_matmuls")  # dense vs linear at f32 tol
def test_implementation_passed_through():
  m = MultiHeadAttention(num_heads=2, normalizer="scaled")
  v = m.init(jax.random.key(0), X)
  dense = MultiHeadAttention(num_heads=2, normalizer="scaled",
                             implementation="dense").apply(v, X)
  lin = MultiHeadAttention(num_heads=2, normalizer="scaled",
                           implementation="linear").apply(v, X)
  np.testing.assert_allclose(dense, lin, rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match="not linear"):
    MultiHeadAttention(num_heads=2, implementation="linear").apply(v, X)


def test_mask_and_cross_attention():
  kv = jnp.ones((2, 3, 16))
  m = MultiHeadAttention(num_heads=2, out_features=8)
  v = m.init(jax.random.key(0), X, kv)
  mask = jnp.array([True, True, False])[None, None, None]
  y = m.apply(v, X, kv, mask=mask)
  assert y.shape == (2, 6, 8)


def test_diagnostics_only_when_mutable():
  m = MultiHeadAttention(num_heads=2)
  v = m.init(jax.random.key(0), X)
  assert set(v) == {"params"}  # init never observes
  _, st = m.apply(v, X, mutable=["intermediates"])
  assert "diagnostics" not in st
  _, st = m.apply(v, X, mutable=["diagnostics", "attention_weights"])
  d = st["diagnostics"]
  assert set(d) == DIAG_KEYS
  w = st["attention_weights"]["weights"][0]
  assert w.shape == (2, 2, 6, 6)
  np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
  assert 0 < float(d["attn_entropy"][0]) <= np.log(6) + 1e-5


@pytest.mark.parametrize("spec", ["relu_seqlen", "relu_seqlen(act=gelu)",
                                  "normsoftmax_learnable", "prenorm(nap)"])
def test_diagnostics_with_string_and_learnable_params(spec):
  m = MultiHeadAttention(num_heads=2, normalizer=spec)
  v = m.init(jax.random.key(0), X)
  _, st = jax.jit(lambda v: m.apply(v, X, mutable=["diagnostics"]))(v)
  assert all(bool(jnp.isfinite(t[0])) for t in
             jax.tree.leaves(st, is_leaf=lambda t: isinstance(t, tuple)))


def test_diagnostic_values_on_known_scores():
  s = jnp.asarray(np.random.RandomState(1).randn(2, 3, 4, 5) * 2, jnp.float32)
  mask = jnp.array([True, True, True, True, False])
  norm = norms.get("softmax")
  w = norm(s, mask=mask)
  d = attention_diagnostics(s, w, norm, {}, mask)
  sv = np.asarray(s)[..., :4]
  np.testing.assert_allclose(d["score_std"], sv.std(-1).mean(), rtol=1e-5)
  wv = np.asarray(w)[..., :4]
  np.testing.assert_allclose(d["attn_entropy"],
                             (-(wv * np.log(wv)).sum(-1)).mean(), rtol=1e-5)
  # softmax: d w_i / d s_i = w_i (1 - w_i).
  diag = jacobian_diagonal(lambda x: norm(x, mask=mask), s)
  np.testing.assert_allclose(diag[..., :4], wv * (1 - wv), rtol=1e-4,
                             atol=1e-7)
  expected = np.mean(wv * (1 - wv) < 1e-3 / 4)
  np.testing.assert_allclose(d["grad_saturation"], expected)
  # Quantiles of the valid entries only (the masked column holds 0 in w's
  # diagonal and is excluded): score_qNN of s, lgrad_qNN of n * w (1 - w).
  for level in QUANTILES:
    np.testing.assert_allclose(d[f"score_q{level:02d}"],
                               np.quantile(sv, level / 100), rtol=1e-5)
    np.testing.assert_allclose(d[f"lgrad_q{level:02d}"],
                               np.quantile(4 * wv * (1 - wv), level / 100),
                               rtol=1e-4, atol=1e-7)
  # A saturated softmax (huge scores) is fully flagged except the winner's
  # neighbours; a linear normalizer never saturates.
  big = s * 1e4
  d = attention_diagnostics(big, norm(big, mask=mask), norm, {}, mask)
  assert float(d["grad_saturation"]) > 0.9
  assert float(d["lgrad_q50"]) < 1e-3
  lin = norms.get("relu_seqlen(act=identity)")
  d = attention_diagnostics(s, lin(s, mask=mask), lin, {}, mask)
  assert float(d["grad_saturation"]) == 0.0


# --- differential attention and Qwen's output gate (issue 29) -------------------
def test_defaults_add_no_parameters():
  p = MultiHeadAttention(num_heads=4).init(jax.random.key(0), X)["params"]
  assert set(p) == {"query", "key", "value", "out"}


def test_headwise_output_gate_halves_the_output_at_zero_init():
  """sigmoid(0) = 1/2 on every head: with zero gate weights and a zero out
  bias the gated layer's output is exactly half the plain one's."""
  plain = MultiHeadAttention(num_heads=2)
  gated = MultiHeadAttention(num_heads=2, output_gate="headwise")
  v = gated.init(jax.random.key(0), X)["params"]
  assert v["output_gate"]["kernel"].shape == (16, 2, 1)
  v = {**v, "output_gate": jax.tree.map(jnp.zeros_like, v["output_gate"])}
  base = {k: v[k] for k in ("query", "key", "value", "out")}
  np.testing.assert_allclose(gated.apply({"params": v}, X),
                             0.5 * plain.apply({"params": base}, X),
                             rtol=1e-6, atol=1e-7)
  g = jax.grad(lambda p: jnp.sum(gated.apply({"params": p}, X) ** 2))(v)
  assert float(jnp.abs(g["output_gate"]["kernel"]).max()) > 0
  e = MultiHeadAttention(num_heads=2, output_gate="elementwise").init(
      jax.random.key(0), X)["params"]
  assert e["output_gate"]["kernel"].shape == (16, 2, 8)
  with pytest.raises(ValueError, match="unknown output_gate 'rowwise'"):
    MultiHeadAttention(num_heads=2, output_gate="rowwise").init(
        jax.random.key(0), X)


def _np_softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def test_differential_attention_by_hand():
  """One head of width 2 (halves of width 1), identity projections."""
  x = jnp.asarray([[[1.0, 2.0], [-1.0, 0.5], [0.25, -2.0]]])      # [1, 3, 2]
  m = MultiHeadAttention(num_heads=1, differential=True, layer_index=2,
                         use_bias=False)
  p = m.init(jax.random.key(0), x)["params"]
  eye = jnp.eye(2).reshape(2, 1, 2)
  p = {**p, "query": {"kernel": eye}, "key": {"kernel": eye},
       "value": {"kernel": eye}, "out": {"kernel": jnp.eye(2).reshape(1, 2, 2)},
       "lambda_q1": jnp.asarray([0.3]), "lambda_k1": jnp.asarray([0.5]),
       "lambda_q2": jnp.asarray([-0.2]), "lambda_k2": jnp.asarray([0.4])}
  got = np.asarray(m.apply({"params": p}, x))[0]
  xs = np.asarray(x, np.float64)[0]
  a1 = _np_softmax(np.outer(xs[:, 0], xs[:, 0]))        # scale 1/sqrt(1)
  a2 = _np_softmax(np.outer(xs[:, 1], xs[:, 1]))
  lam_init = 0.8 - 0.6 * np.exp(-0.3 * 2)
  lam = np.exp(0.3 * 0.5) - np.exp(-0.2 * 0.4) + lam_init
  o = (a1 - lam * a2) @ xs
  o = o / np.sqrt(np.mean(o * o, -1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(got, (1 - lam_init) * o, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spec", ["softmax", "relu_seqlen", "stablemax",
                                  "softmax_sink"])
def test_differential_attention_any_normalizer_and_gradients(spec):
  m = MultiHeadAttention(num_heads=2, normalizer=spec, differential=True)
  v = m.init(jax.random.key(0), X)
  p = v["params"]
  assert p["lambda_q1"].shape == (4,) and p["diff_norm"]["scale"].shape == (8,)
  y = m.apply(v, X)
  assert y.shape == X.shape and np.all(np.isfinite(y))
  g = jax.grad(lambda p: jnp.sum(m.apply({"params": p}, X) ** 2))(p)
  for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
    assert float(jnp.abs(g[name]).max()) > 0, name
  # The chunked path gives the same layer output.
  c = MultiHeadAttention(num_heads=2, normalizer=spec, differential=True,
                         implementation="chunked", chunk_size=4)
  if norms.get(spec).streamable:
    np.testing.assert_allclose(c.apply(v, X), y, rtol=1e-4, atol=1e-5)


def test_differential_needs_an_even_head_dim_and_fixed_lambda_init():
  with pytest.raises(ValueError, match="head_dim=3 must be even"):
    MultiHeadAttention(num_heads=2, qkv_features=6, differential=True).init(
        jax.random.key(0), X)
  from softattn.nn.attention import diff_lambda_init  # noqa: PLC0415
  np.testing.assert_allclose(diff_lambda_init(0), 0.2)       # 0.8 - 0.6
  np.testing.assert_allclose(diff_lambda_init(1), 0.8 - 0.6 * np.exp(-0.3))
  # A fixed lambda_init overrides the depth rule.
  fixed = [MultiHeadAttention(num_heads=2, differential=True, layer_index=i,
                              diff_lambda_init=0.5) for i in (0, 7)]
  v = fixed[0].init(jax.random.key(0), X)
  np.testing.assert_allclose(fixed[0].apply(v, X), fixed[1].apply(v, X))
  by_depth = MultiHeadAttention(num_heads=2, differential=True, layer_index=7)
  assert float(jnp.abs(by_depth.apply(v, X) - fixed[0].apply(v, X)).max()) > 1e-3


def test_new_learnable_normalizer_parameters():
  p = MultiHeadAttention(num_heads=2, normalizer="softmax_sink").init(
      jax.random.key(0), X)["params"]
  np.testing.assert_allclose(p["norm_sink"], np.zeros((2, 1, 1)))
  p = MultiHeadAttention(num_heads=2, normalizer="consmax").init(
      jax.random.key(0), X)["params"]
  np.testing.assert_allclose(p["norm_beta"], np.full((2, 1, 1), 2.5))
  np.testing.assert_allclose(p["norm_denom"], np.full((2, 1, 1), 100.0))
  with pytest.raises(ValueError, match="lssar.*'power'.*cannot learn"):
    MultiHeadAttention(num_heads=2, normalizer="lssar").init(
        jax.random.key(0), X)
