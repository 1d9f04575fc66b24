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
