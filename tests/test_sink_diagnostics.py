"""Sink diagnostics: each statistic on a constructed case with a known
answer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn.models.vit import ViT
from softattn.nn import diagnostics as diag
from softattn.nn.attention import MultiHeadAttention


def test_effective_rank_of_known_spectra():
  eye = jnp.eye(4)
  assert float(diag.effective_rank(eye)) == pytest.approx(4.0, rel=1e-6)
  assert float(diag.effective_rank(eye.at[3, 3].set(0.0))) == pytest.approx(
      3.0, rel=1e-6)
  # Rank one: every row a multiple of one vector (a broadcast head).
  u, w = jnp.arange(1.0, 6.0), jnp.array([1.0, -2.0, 0.5])
  assert float(diag.effective_rank(jnp.outer(u, w))) == pytest.approx(
      1.0, abs=1e-5)
  # Singular values 3 and 1: p = (3/4, 1/4), erank = exp(H(p)).
  p = np.array([0.75, 0.25])
  expect = np.exp(-(p * np.log(p)).sum())
  m = jnp.diag(jnp.array([3.0, 1.0]))
  assert float(diag.effective_rank(m)) == pytest.approx(expect, rel=1e-6)
  assert float(diag.effective_rank(jnp.zeros((5, 3)))) == 0.0
  # Scale-free, and batched over leading axes.
  both = diag.effective_rank(jnp.stack([m, 10 * m]))
  np.testing.assert_allclose(both, [expect, expect], rtol=1e-6)


def test_sink_statistics_on_a_head_attending_to_one_zero_value_key():
  b, h, lq, lk, d = 2, 3, 5, 6, 4
  sink = 4
  w = jnp.zeros((b, h, lq, lk)).at[..., sink].set(1.0)  # all weight on key 4
  v = jnp.asarray(np.random.RandomState(0).randn(b, lk, h, d), jnp.float32)
  v = v.at[:, sink].set(0.0)  # ... whose value is zero: a no-op sink
  out = jnp.einsum("bhqk,bkhd->bqhd", w, v)
  s = diag.sink_statistics(w, v, out)
  np.testing.assert_array_equal(s["top_key_index"], np.full((b, h), sink))
  np.testing.assert_allclose(s["top_key_share"], 1.0)
  np.testing.assert_array_equal(s["top_key_vnorm"], 0.0)
  np.testing.assert_array_equal(s["top_key_vnorm_ratio"], 0.0)
  np.testing.assert_array_equal(s["out_erank"], 0.0)  # the head outputs 0
  # Uniform attention: every key gets 1/Lk; the first wins the tie.
  u = jnp.full((b, h, lq, lk), 1.0 / lk)
  s = diag.sink_statistics(u, v, jnp.einsum("bhqk,bkhd->bqhd", u, v))
  np.testing.assert_allclose(s["top_key_share"], 1.0 / lk, rtol=1e-6)
  np.testing.assert_array_equal(s["top_key_index"], 0)
  # ... and every query reads the same mean value: rank one, a broadcast.
  np.testing.assert_allclose(s["out_erank"], 1.0, atol=1e-4)
  # A masked key never counts, however large its weight.
  mask = jnp.arange(lk) != sink
  s = diag.sink_statistics(w.at[..., 0].set(0.5), v, out, mask)
  np.testing.assert_array_equal(s["top_key_index"], 0)
  np.testing.assert_allclose(s["top_key_share"], 1.0)
  # The value norm ratio: key 1's value twice every other key's norm.
  vv = jnp.ones((b, lk, h, d)).at[:, 1].set(2.0)
  w1 = jnp.zeros((b, h, lq, lk)).at[..., 1].set(1.0)
  s = diag.sink_statistics(w1, vv, out)
  np.testing.assert_allclose(s["top_key_vnorm"], 4.0)  # ||(2, 2, 2, 2)||
  np.testing.assert_allclose(s["top_key_vnorm_ratio"], 2.0 / (7.0 / 6.0),
                             rtol=1e-6)


def test_token_norms():
  x = jnp.ones((2, 5, 4)).at[0, 3].set(10.0).at[1, 0].set(-3.0)
  s = diag.token_norm_statistics(x)
  np.testing.assert_allclose(s["token_norm_max"], [20.0, 6.0])
  np.testing.assert_array_equal(s["token_norm_argmax"], [3, 0])
  np.testing.assert_allclose(s["token_norm_median"], [2.0, 2.0])


def test_multihead_attention_sows_sinks_only_when_asked():
  """A layer whose keys all point at token 0, whose value is zero."""
  rng = np.random.RandomState(0)
  x = rng.randn(2, 7, 8).astype(np.float32)
  x[:, 0] = 0.0
  x[:, 0, 0] = 1.0  # token 0: feature 0 only; the others: no feature 0
  x[:, 1:, 0] = 0.0
  m = MultiHeadAttention(num_heads=2)
  v = jax.tree.map(np.array, m.init(jax.random.key(0), x))
  p = v["params"]
  p["query"]["kernel"][:] = 0.0
  p["query"]["bias"][:] = 0.0
  p["query"]["bias"][:, 0] = 1.0                 # q = e_0 in both heads
  p["key"]["kernel"][:] = 0.0
  p["key"]["kernel"][0, :, 0] = 100.0            # k = 100 x[0] e_0
  p["value"]["kernel"][0] = 0.0                  # v ignores feature 0:
  p["value"]["bias"][:] = 0.0                    # token 0's value is zero
  _, st = m.apply(v, x, mutable=["diagnostics"])
  assert "sinks" not in st
  _, st = m.apply(v, x, mutable=["sinks"])
  s = {k: t[0] for k, t in st["sinks"].items()}
  np.testing.assert_array_equal(s["top_key_index"], 0)
  assert float(jnp.min(s["top_key_share"])) > 0.99
  np.testing.assert_array_equal(s["top_key_vnorm"], 0.0)
  np.testing.assert_array_equal(s["top_key_vnorm_ratio"], 0.0)
  assert "sinks" not in m.init(jax.random.key(0), x)


def _sink_on_a_register_vit(scan=False):
  """A one-block ViT whose heads all attend to register 0, whose value is
  zero, and whose residual stream's largest token is that register."""
  r, width = 2, 32
  m = ViT(variant="mu/4", depth=1, num_classes=3, pool="gap", num_registers=r,
          scan=scan)
  images = jnp.zeros((3, 16, 16, 3))  # patch tokens: embedding bias 0
  v = jax.tree.map(np.array, m.init(jax.random.key(0), images))
  p = v["params"]
  p["pos_embedding"][:] = 0.0                # ... and no position: all 0
  p["registers"][:] = 0.0
  p["registers"][0, 0, 0] = 50.0             # register 0: 50 e_0
  blk = p["Transformer"]["encoderblock" if scan else "encoderblock_0"]
  att = blk["MultiHeadDotProductAttention_0"]
  lead = (0,) if scan else ()
  att["query"]["kernel"][:] = 0.0
  att["query"]["bias"][:] = 0.0
  att["query"]["bias"][lead + (slice(None), 0)] = 1.0
  att["key"]["kernel"][:] = 0.0
  att["key"]["kernel"][lead + (0, slice(None), 0)] = 100.0  # k ~ LN(x)_0
  att["value"]["kernel"][:] = 0.0
  att["value"]["bias"][:] = 0.0
  return m, v, images


@pytest.mark.parametrize("scan", [False, True])
def test_vit_sink_on_a_zero_value_register_is_found(scan):
  m, v, images = _sink_on_a_register_vit(scan)
  _, st = jax.jit(lambda v: m.apply(v, images, mutable=["sinks"]))(v)
  out = diag.summarize_sinks(st["sinks"])
  att = "Transformer/encoderblock_0/MultiHeadDotProductAttention_0"
  for h in range(2):
    k = f"{att}/h{h}"
    assert float(out[f"{k}/top_key_share"]) > 0.99
    assert float(out[f"{k}/top_key_register"]) == 1.0
    assert float(out[f"{k}/top_key_patch"]) == 0.0
    assert float(out[f"{k}/top_key_vnorm"]) == 0.0
    assert float(out[f"{k}/out_erank"]) == 0.0  # zero values: zero output
  blk = "Transformer/encoderblock_0"
  assert float(out[f"{blk}/token_norm_max_register"]) == 1.0
  assert float(out[f"{blk}/token_norm_max"]) == pytest.approx(50.0, rel=0.2)
  assert float(out[f"{blk}/token_norm_median"]) < 1.0
  # Every key is one scalar; nothing for the (absent) MAP head.
  assert all(np.shape(x) == () for x in out.values())
  assert len(out) == 2 * 7 + 5


def test_summary_weights_examples_and_reads_the_nearest_token_kinds():
  kinds = jnp.array([diag.CLS, diag.PATCH, diag.PATCH, diag.REGISTER])
  tree = {"token_kind": (kinds,),
          "blk": {"att": {"top_key_index": (jnp.array([[0, 3], [3, 3]]),),
                          "top_key_share": (jnp.array([[0.2, 0.4],
                                                       [0.6, 0.8]]),),
                          "top_key_vnorm": (jnp.ones((2, 2)),),
                          "top_key_vnorm_ratio": (jnp.ones((2, 2)),),
                          "out_erank": (jnp.ones((2, 2)),)}},
          "head": {"token_kind": (jnp.full((3,), diag.PATCH),),
                   "att": {"top_key_index": (jnp.array([[0], [2]]),),
                           "top_key_share": (jnp.ones((2, 1)),),
                           "top_key_vnorm": (jnp.ones((2, 1)),),
                           "top_key_vnorm_ratio": (jnp.ones((2, 1)),),
                           "out_erank": (jnp.ones((2, 1)),)}}}
  out = diag.summarize_sinks(tree)
  assert float(out["blk/att/h0/top_key_share"]) == pytest.approx(0.4)
  assert float(out["blk/att/h0/top_key_cls"]) == 0.5
  assert float(out["blk/att/h0/top_key_register"]) == 0.5
  assert float(out["blk/att/h1/top_key_register"]) == 1.0
  assert float(out["head/att/h0/top_key_patch"]) == 1.0  # its own kinds
  # The second example is padding: weight 0.
  out = diag.summarize_sinks(tree, jnp.array([1.0, 0.0]))
  assert float(out["blk/att/h0/top_key_share"]) == pytest.approx(0.2)
  assert float(out["blk/att/h0/top_key_cls"]) == 1.0


def test_scanned_layers_are_named_and_valued_as_unrolled():
  x = jnp.asarray(np.random.RandomState(0).randn(2, 16, 16, 3), jnp.float32)
  kw = dict(variant="mu/4", depth=2, num_classes=3, pool="tok",
            num_registers=1, head_zeroinit=False)
  loop, scan = ViT(**kw), ViT(scan=True, **kw)
  v = jax.jit(loop.init)(jax.random.key(0), x)
  p = dict(v["params"])
  t = dict(p["Transformer"])
  t["encoderblock"] = jax.tree.map(lambda *a: jnp.stack(a),
                                   *[t.pop(f"encoderblock_{i}")
                                     for i in range(2)])
  p["Transformer"] = t
  summary = lambda m, v: diag.summarize_sinks(  # noqa: E731
      jax.jit(lambda v: m.apply(v, x, mutable=["sinks"]))(v)[1]["sinks"])
  a, b = summary(loop, v), summary(scan, {"params": p})
  assert sorted(a) == sorted(b)
  assert any("encoderblock_1/MultiHeadDotProductAttention_0/h1/" in k
             for k in a)
  for k in a:
    np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_sinks_step_on_a_probe_batch():
  """The step the loop runs at eval: the first PROBE_EXAMPLES examples,
  padding weighted 0, one scalar per key."""
  import optax  # pylint: disable=g-import-not-at-top
  from softattn import steps  # pylint: disable=g-import-not-at-top
  m, v, images = _sink_on_a_register_vit()
  s = steps.Settings(model=m, tx=optax.sgd(0.0), loss=lambda l, t: l[:, 0],
                     num_classes=3)
  n = diag.PROBE_EXAMPLES + 4
  batch = {"image": jnp.zeros((n, 16, 16, 3)),
           "label": jnp.zeros((n,), jnp.int32),
           "mask": jnp.arange(n) < 1}
  out = jax.jit(lambda p, b: steps.sinks_step(s, p, {}, b))(v["params"],
                                                            batch)
  key = ("Transformer/encoderblock_0/MultiHeadDotProductAttention_0/h0/"
         "top_key_register")
  assert float(out[key]) == 1.0 and len(out) == 19
  from softattn.models import resnet  # pylint: disable=g-import-not-at-top
  rn = resnet.ResNet(depth=18, num_classes=3)
  rv = rn.init(jax.random.key(0), batch["image"][:1])
  s = steps.Settings(model=rn, tx=optax.sgd(0.0), loss=lambda l, t: l[:, 0],
                     num_classes=3)
  assert jax.eval_shape(lambda b: steps.sinks_step(
      s, rv["params"], rv["batch_stats"], b), batch) == {}
