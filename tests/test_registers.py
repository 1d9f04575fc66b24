"""Register tokens in the ViT (Darcet et al. 2023): layout, pooling, loading."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn.models.big_vision_io import (flatten, load_big_vision_npz,
                                           save_big_vision_npz)
from softattn.models.vit import ViT

X = jnp.asarray(np.random.RandomState(0).randn(2, 16, 16, 3), jnp.float32)
KW = dict(variant="mu/4", depth=2, num_classes=7, head_zeroinit=False)
HW = 16  # 16 x 16 images, patch 4: a 4 x 4 grid


def _bits(tree):
  return [np.asarray(x).view(np.uint8) for x in jax.tree.leaves(tree)]


def _same_bits(a, b):
  return (jax.tree.structure(a) == jax.tree.structure(b)
          and all(np.array_equal(x, y) for x, y in zip(_bits(a), _bits(b))))


@pytest.mark.parametrize("pool", ["tok", "gap", "map"])
def test_no_registers_is_the_model_without_them_bit_for_bit(pool):
  plain = ViT(pool=pool, **KW)
  zero = ViT(pool=pool, num_registers=0, **KW)
  v = jax.jit(plain.init)(jax.random.key(0), X)
  v0 = jax.jit(zero.init)(jax.random.key(0), X)
  assert _same_bits(v, v0) and set(v) == {"params"}
  y = jax.jit(plain.apply)(v, X)
  assert _same_bits(y, jax.jit(zero.apply)(v0, X))
  # Asking for the sink diagnostics does not change the logits either.
  ys, _ = jax.jit(lambda v: zero.apply(v, X, mutable=["sinks"]))(v0)
  assert _same_bits(y, ys)
  # Registers add one [1, R, D] parameter and change nothing else's init.
  vr = jax.jit(ViT(pool=pool, num_registers=3, **KW).init)(
      jax.random.key(0), X)
  reg = dict(vr["params"])
  assert reg.pop("registers").shape == (1, 3, 32)
  assert _same_bits(reg, dict(v["params"]))


def _embedded(model, v):
  """The tokens the encoder gets (the embedding dropout's output)."""
  _, st = model.apply(v, X, capture_intermediates=True)
  return st["intermediates"]["Dropout_0"]["__call__"][0]


@pytest.mark.parametrize("pool", ["tok", "gap"])
def test_registers_follow_the_patches_without_a_position(pool):
  r = 2
  m = ViT(pool=pool, num_registers=r, **KW)
  v = m.init(jax.random.key(0), X)
  v = jax.tree.map(np.asarray, v)
  v["params"]["registers"] = np.random.RandomState(1).randn(1, r, 32).astype(
      np.float32)
  x = _embedded(m, v)
  cls = 1 if pool == "tok" else 0
  assert x.shape == (2, cls + HW + r, 32)
  # Registers enter as the parameter itself, for every example.
  np.testing.assert_array_equal(x[:, -r:],
                                np.broadcast_to(v["params"]["registers"],
                                                (2, r, 32)))
  # The patches are what they are without registers.
  x0 = _embedded(ViT(pool=pool, **KW), {"params": {
      k: w for k, w in v["params"].items() if k != "registers"}})
  np.testing.assert_array_equal(x[:, :cls + HW], x0)
  np.testing.assert_array_equal(m.token_kinds((4, 4)),
                                [0] * cls + [2] * HW + [1] * r)


@pytest.mark.parametrize("pool", ["tok", "gap", "map"])
def test_pooling_never_sees_the_registers(pool):
  """Every block attends to the registers; the pool (and the MAP head's
  keys) covers the class token and the patches only."""
  r = 3
  m = ViT(pool=pool, num_registers=r, depth=1, variant="mu/4", num_classes=5,
          head_zeroinit=False)
  v = jax.tree.map(np.asarray, m.init(jax.random.key(0), X))
  y = m.apply(v, X)
  _, st = m.apply(v, X, mutable=["attention_weights"])
  w = st["attention_weights"]["Transformer"]["encoderblock_0"][
      "MultiHeadDotProductAttention_0"]["weights"][0]
  cls = 1 if pool == "tok" else 0
  assert w.shape[-1] == cls + HW + r  # every block sees the registers
  if pool == "map":  # the MAP head attends to the patches only
    wm = st["attention_weights"]["MAPHead_0"][
        "MultiHeadDotProductAttention_0"]["weights"][0]
    assert wm.shape[-1] == HW
  # Pooling: the pre-logits equal the pool over cls + patches of the encoder
  # output (gap: their mean; tok: the class token).
  _, it = m.apply(v, X, capture_intermediates=True, mutable=["intermediates"])
  enc = it["intermediates"]["Transformer"]["__call__"][0]
  assert enc.shape[1] == cls + HW + r
  pre = it["intermediates"]["pre_logits"][0]
  if pool == "gap":
    np.testing.assert_allclose(pre, enc[:, :HW].mean(1), rtol=1e-6, atol=1e-6)
  elif pool == "tok":
    np.testing.assert_array_equal(pre, enc[:, 0])
  assert y.shape == (2, 5)


def test_registers_with_scan_sincos_and_bad_counts():
  kw = dict(KW, pool="tok", num_registers=2, posemb="sincos2d")
  loop, scan = ViT(**kw), ViT(scan=True, **kw)
  v = jax.jit(loop.init)(jax.random.key(0), X)
  p = dict(v["params"])
  t = dict(p["Transformer"])
  t["encoderblock"] = jax.tree.map(lambda *a: jnp.stack(a),
                                   *[t.pop(f"encoderblock_{i}")
                                     for i in range(2)])
  p["Transformer"] = t
  np.testing.assert_allclose(jax.jit(loop.apply)(v, X),
                             jax.jit(scan.apply)({"params": p}, X),
                             rtol=1e-5, atol=1e-5)
  for bad in (-1, 1.5, True):
    with pytest.raises(ValueError, match="num_registers=.*count >= 0"):
      ViT(num_registers=bad, **KW)


@pytest.fixture(scope="module")
def bv_files(tmp_path_factory):
  d = tmp_path_factory.mktemp("bv")
  plain = ViT(pool="tok", **KW)
  p = plain.init(jax.random.key(3), X)["params"]
  save_big_vision_npz(d / "plain.npz", p)
  withr = ViT(pool="tok", num_registers=2, **KW)
  pr = withr.init(jax.random.key(4), X)["params"]
  save_big_vision_npz(d / "reg.npz", pr)
  return d, p, pr


def test_big_vision_checkpoint_without_registers_names_the_fix(bv_files):
  d, p, _ = bv_files
  m = ViT(pool="tok", num_registers=4, **KW)
  with pytest.raises(ValueError, match=r"no register tokens.*"
                     r"num_registers=4: pass dont_load=\('registers',\).*"
                     r"init_from.skip='registers'"):
    load_big_vision_npz(d / "plain.npz", m)
  loaded = load_big_vision_npz(d / "plain.npz", m, dont_load=("registers",))
  assert loaded["registers"].shape == (1, 4, 32)
  np.testing.assert_array_equal(loaded["cls"], p["cls"])
  np.testing.assert_array_equal(loaded["pos_embedding"], p["pos_embedding"])


def test_checkpoint_with_registers_round_trips_and_needs_the_count(bv_files):
  d, _, pr = bv_files
  m = ViT(pool="tok", num_registers=2, **KW)
  loaded = load_big_vision_npz(d / "reg.npz", m)
  for k, v in flatten(pr).items():
    np.testing.assert_array_equal(flatten(loaded)[k], v)
  with pytest.raises(ValueError, match="has 2 register tokens but the model "
                     "has num_registers=0: set num_registers=2"):
    load_big_vision_npz(d / "reg.npz", ViT(pool="tok", **KW))
  with pytest.raises(ValueError, match="num_registers=3: set num_registers=2"):
    load_big_vision_npz(d / "reg.npz", ViT(pool="tok", num_registers=3, **KW))


def test_configs_take_a_registers_argument():
  import os  # pylint: disable=g-import-not-at-top
  from softattn import config_files  # pylint: disable=g-import-not-at-top
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for name in ("cifar10_vit.py", "i21k_vit.py"):
    path = os.path.join(repo, "configs", name)
    assert config_files.load_file(path).model.num_registers == 0
    c = config_files.load_file(path + ":registers=4")
    assert c.model.num_registers == 4
    ViT(**dict(c.model, num_classes=10))  # builds
