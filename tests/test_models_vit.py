"""ViT: shapes, big_vision variants and parameter counts, options, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import configlib
from softattn.models.vit import ViT, decode_variant, posemb_sincos_2d


def n_params(model, shape):
  v = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros(shape))
  return sum(int(np.prod(a.shape)) for a in jax.tree.leaves(v["params"]))


X = jnp.asarray(np.random.RandomState(0).randn(2, 16, 16, 3), jnp.float32)


def test_vit_b16_parameter_count():
  # The well-known ViT-B/16 count (original layout: posemb over cls + 196).
  m = ViT(variant="B/16", num_classes=1000, pool="tok",
          posemb_with_cls=True)
  assert n_params(m, (1, 224, 224, 3)) == 86_567_656
  # big_vision adds the posemb before the cls token: one row of 768 fewer.
  m = ViT(variant="B/16", num_classes=1000, pool="tok")
  assert n_params(m, (1, 224, 224, 3)) == 86_567_656 - 768


def test_variants_decode_to_big_vision_table():
  assert decode_variant("S/16") == dict(width=384, depth=12, mlp_dim=1536,
                                        num_heads=6, patch_size=(16, 16))
  assert decode_variant("So400m/14")["depth"] == 27
  assert decode_variant("g")["width"] == 1408
  with pytest.raises(ValueError, match="valid: mu, Ti"):
    decode_variant("XL/16")
  with pytest.raises(ValueError, match="bad patch size"):
    decode_variant("B/x")


@pytest.mark.parametrize("pool", ["gap", "tok", "map"])
def test_vit_shapes_and_pre_logits(pool):
  m = ViT(variant="mu/4", num_classes=10, pool=pool,
          rep_size=16, dropout=0.1)
  v = jax.eval_shape(m.init, jax.random.key(0), X)
  y, st = jax.eval_shape(
      lambda v: m.apply(v, X, train=True, rngs={"dropout": jax.random.key(1)},
                        mutable=["intermediates"]), v)
  assert y.shape == (2, 10) and y.dtype == jnp.float32
  assert st["intermediates"]["pre_logits"][0].shape == (2, 16)


def test_head_inits():
  m = ViT(variant="mu/4", num_classes=5, pool="map",
          rep_size=True, dropout=0.1)
  v = jax.jit(m.init)(jax.random.key(0), X)
  y = jax.jit(lambda v: m.apply(v, X, train=True,
                                rngs={"dropout": jax.random.key(1)}))(v)
  np.testing.assert_allclose(y, 0.0)  # head_zeroinit, bias 0
  m = ViT(variant="mu/4", num_classes=5, head_bias_init=-10.0,
          head_zeroinit=False)
  v = jax.jit(m.init)(jax.random.key(0), X)
  np.testing.assert_allclose(v["params"]["head"]["bias"], -10.0)
  assert float(jnp.abs(v["params"]["head"]["kernel"]).sum()) > 0


def test_ti4_default_contract_model():
  m = ViT(variant="Ti/4", num_classes=10, normalizer="softmax")
  v = jax.eval_shape(m.init, jax.random.key(0), jnp.zeros((2, 32, 32, 3)))
  assert v["params"]["pos_embedding"].shape == (1, 64, 192)
  assert "encoderblock_11" in v["params"]["Transformer"]


def test_sincos_posemb_has_no_parameter():
  m = ViT(variant="mu/4", num_classes=10, posemb="sincos2d")
  v = jax.eval_shape(m.init, jax.random.key(0), X)
  assert "pos_embedding" not in v["params"]
  pe = posemb_sincos_2d(4, 4, 32)
  assert pe.shape == (1, 16, 32)
  assert len({tuple(np.round(r, 5)) for r in np.asarray(pe[0])}) == 16


def test_scan_matches_unrolled_layers():
  kw = dict(variant="mu/4", num_classes=10, depth=3, head_zeroinit=False)
  loop, scan = ViT(**kw), ViT(scan=True, **kw)
  v = jax.jit(loop.init)(jax.random.key(0), X)
  p = dict(v["params"])
  t = dict(p["Transformer"])
  blocks = [t.pop(f"encoderblock_{i}") for i in range(3)]
  t["encoderblock"] = jax.tree.map(lambda *a: jnp.stack(a), *blocks)
  p["Transformer"] = t
  np.testing.assert_allclose(jax.jit(loop.apply)(v, X),
                             jax.jit(scan.apply)({"params": p}, X),
                             rtol=1e-5, atol=1e-5)
  # Diagnostics are stacked per layer under scan.
  _, st = jax.jit(lambda p: scan.apply({"params": p}, X,
                                       mutable=["diagnostics"]))(p)
  d = st["diagnostics"]["Transformer"]["encoderblock"][
      "MultiHeadDotProductAttention_0"]
  assert d["attn_entropy"][0].shape == (3,)
  # The scanned model trains: gradients flow through remat + scan.
  g = jax.jit(jax.grad(lambda p: scan.apply({"params": p}, X).sum()))(p)
  assert float(jnp.abs(g["Transformer"]["encoderblock"]["MlpBlock_0"][
      "Dense_0"]["kernel"]).sum()) > 0


def test_bf16_matmuls_forward():
  m = ViT(variant="mu/4", num_classes=10, dtype_mm="bfloat16",
          head_zeroinit=False, normalizer="relu_seqlen")
  v = jax.jit(m.init)(jax.random.key(0), X)
  y = jax.jit(m.apply)(v, X)
  assert y.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(y)))
  ref = jax.jit(ViT(variant="mu/4", num_classes=10,
                    head_zeroinit=False,
                    normalizer="relu_seqlen").apply)(v, X)
  np.testing.assert_allclose(y, ref, atol=0.1, rtol=0.1)


def test_normalizer_swap_keeps_parameter_count():
  base = n_params(ViT(variant="mu/4", num_classes=10), X.shape)
  for spec in ["relu_seqlen", "normsoftmax(gamma=sqrt_d)", "scaled",
               "prenorm(sin2_max_shifted)", "sparsemax"]:
    m = ViT(variant="mu/4", num_classes=10, normalizer=spec)
    assert n_params(m, X.shape) == base, spec
  # Learnable ones add exactly their parameters (mu: 1 layer, 2 heads).
  m = ViT(variant="mu/4", num_classes=10,
          normalizer="normsoftmax_learnable")
  assert n_params(m, X.shape) == base + 1
  m = ViT(variant="mu/4", num_classes=10, normalizer="ssmax")
  assert n_params(m, X.shape) == base + 2
  m = ViT(variant="mu/4", num_classes=10, normalizer="nap",
          pool="map")
  base_map = n_params(ViT(variant="mu/4", num_classes=10,
                          pool="map"), X.shape)
  assert n_params(m, X.shape) == base_map + 2 * (2 + 2)  # g, b; block + MAP


def test_unknown_names_raise_with_valid_list():
  with pytest.raises(configlib.ConfigError, match="valid names: .*vit"):
    configlib.build_model({"model_name": "vitt", "model": {}})
  with pytest.raises(ValueError, match="valid: gap, tok, map"):
    n_params(ViT(variant="mu/4", pool="cls"), X.shape)
  with pytest.raises(ValueError, match="multiple of the patch"):
    n_params(ViT(variant="mu/5"), X.shape)
  with pytest.raises(configlib.ConfigError, match=(
      r"^config\.model_name='vit' / config\.model: .*unexpected keyword "
      r"argument 'widht'")):
    configlib.build_model({"model_name": "vit", "model": {"widht": 3}})


def test_unrolled_remat_is_the_plain_model_with_recompute():
  """remat=True: same parameter tree, same outputs and gradients; the
  backward recomputes each block (a checkpoint per layer in the jaxpr)."""
  kw = dict(variant="mu/4", num_classes=10, depth=2, head_zeroinit=False)
  plain, remat = ViT(**kw), ViT(remat=True, **kw)
  v = jax.jit(plain.init)(jax.random.key(0), X)
  assert jax.tree.structure(v) == jax.tree.structure(
      jax.eval_shape(remat.init, jax.random.key(0), X))
  loss = lambda m: lambda p: m.apply({"params": p}, X).sum()
  np.testing.assert_allclose(jax.jit(plain.apply)(v, X),
                             jax.jit(remat.apply)(v, X), rtol=1e-6)
  g_plain = jax.jit(jax.grad(loss(plain)))(v["params"])
  g_remat = jax.jit(jax.grad(loss(remat)))(v["params"])
  for a, b in zip(jax.tree.leaves(g_plain), jax.tree.leaves(g_remat)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  jaxpr = str(jax.make_jaxpr(jax.grad(loss(remat)))(v["params"]))
  assert jaxpr.count("checkpoint") + jaxpr.count("remat") >= 2


def test_differential_attention_and_output_gate_from_the_model_config():
  """Off by default; on, each block gets its depth's lambda_init (Ye et al.)
  and its own lambda vectors, and the MAP head counts as layer ``depth``."""
  kw = dict(variant="mu/4", num_classes=10, depth=2, head_zeroinit=False)
  base = n_params(ViT(**kw), X.shape)
  m = ViT(differential=True, output_gate="headwise",
          pool="map", **kw)
  v = jax.jit(m.init)(jax.random.key(0), X)
  blocks = [v["params"]["Transformer"][f"encoderblock_{i}"][
      "MultiHeadDotProductAttention_0"] for i in range(2)]
  for b in blocks:
    assert {"lambda_q1", "diff_norm", "output_gate"} <= set(b)
  mods = {}
  # Jitted (eagerly it took ~15 s): the filter records each module as the
  # apply is traced.
  jax.jit(lambda v, x: m.apply(
      v, x, method=lambda mdl, x: mdl(x),
      capture_intermediates=lambda mdl, _: (
          mods.setdefault(mdl.name, []).append(
              getattr(mdl, "layer_index", None)) and False)))(v, X)
  layer_idx = sorted(set(mods["MultiHeadDotProductAttention_0"]))
  assert layer_idx == [0, 1, 2]  # two blocks + the MAP head
  base_map = n_params(ViT(pool="map", **kw), X.shape)
  head_dim = 32 // 2  # mu: width 32, 2 heads
  extra = 4 * head_dim // 2 + head_dim + 32 * 2 + 2  # lambdas, norm, gate
  assert n_params(m, X.shape) == base_map + 3 * extra
  assert base != base_map
  y = jax.jit(m.apply)(v, X)
  assert y.shape == (2, 10) and bool(jnp.all(jnp.isfinite(y)))
  with pytest.raises(ValueError, match="set diff_lambda_init"):
    jax.eval_shape(ViT(differential=True, scan=True, **kw).init,
                   jax.random.key(0), X)
  scanned = ViT(differential=True, scan=True,
                diff_lambda_init=0.8, **kw)
  assert n_params(scanned, X.shape) == base + 2 * (
      4 * head_dim // 2 + head_dim)
