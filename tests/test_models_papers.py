"""Element-wise models A-H, VGG control, LeViT demo; every model's contract
as ``configlib.build_model`` builds it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import configlib, models
from softattn.models.elementwise import (PAPER_COUNTS, ElementWiseNet,
                                          VGGControl)
from softattn.models.levit_demo import LeViTDemo
from softattn.nn.elementwise import ElementWiseAttention


def n_params(model, shape):
  v = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros(shape))
  return sum(int(np.prod(a.shape)) for a in jax.tree.leaves(v["params"]))


def test_control_model_counts():
  assert n_params(VGGControl(), (1, 28, 28, 1)) == 929_510
  assert n_params(VGGControl(), (1, 32, 32, 3)) == 961_310


@pytest.mark.parametrize("variant", sorted(PAPER_COUNTS))
def test_elementwise_paper_counts(variant):
  m = ElementWiseNet(variant=variant)
  assert n_params(m, (1, 28, 28, 1)) == PAPER_COUNTS[variant]


def test_elementwise_inferred_details_are_switchable():
  # Plain concatenation of 16 heads: the conv sees 16 channels (+8*9 each).
  m = ElementWiseNet(variant="D", head_groups=0)
  assert n_params(m, (1, 28, 28, 1)) == PAPER_COUNTS["D"] + 2 * 72
  # One relevance BN per layer instead of one shared.
  m = ElementWiseNet(variant="E", shared_relevance_bn=False)
  assert n_params(m, (1, 28, 28, 1)) == PAPER_COUNTS["E"] + 3 * 2 * 8
  with pytest.raises(ValueError, match="valid: A, B"):
    n_params(ElementWiseNet(variant="Z"), (1, 4, 4, 1))


def test_elementwise_layer_math():
  x = jnp.asarray(np.random.RandomState(0).rand(2, 4, 5, 3), jnp.float32)
  m = ElementWiseAttention(heads=2)
  v = m.init(jax.random.key(0), x)
  p = v["params"]
  xn = np.asarray(x, np.float64)

  def softmax(a, axis):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)

  heads = []
  for h in range(2):
    ox = softmax(xn * np.asarray(p["x_weights"][h]), axis=2)   # along W
    oy = softmax(xn * np.asarray(p["y_weights"][h]), axis=1)   # along H
    heads.append(xn * ox * oy)
  cat = np.concatenate(heads, -1)
  conv = jax.lax.conv_general_dilated(
      jnp.asarray(cat, jnp.float32), p["conv"]["kernel"], (1, 1),
      [(1, 1), (1, 1)], dimension_numbers=("NHWC", "HWIO", "NHWC"))
  ref = np.maximum(np.asarray(conv) + np.asarray(p["conv"]["bias"]) + xn, 0)
  np.testing.assert_allclose(m.apply(v, x), ref, rtol=1e-4, atol=1e-6)


def test_levit_demo_structure():
  m = LeViTDemo(depth=1)
  # stem 628,224 + block 2,102,784 + head 51,300 (8 heads of 64, 16 tokens)
  assert n_params(m, (1, 32, 32, 3)) == 2_782_308
  v = jax.eval_shape(m.init, jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
  assert v["params"]["block0_attn"]["qkv"]["kernel"].shape == (512, 1536)
  for spec in ["sin_softmax", "prenorm(softmax)", "siren_max"]:
    assert n_params(LeViTDemo(depth=1, normalizer=spec),
                    (1, 32, 32, 3)) == 2_782_308


TINY = {
    "vit": dict(variant="mu/4", num_classes=10),
    "preresnet": dict(depth=8, num_classes=10),
    "wrn": dict(depth=10, widen=1, num_classes=10),
    "resnet": dict(depth=18, num_classes=10),
    "levit_demo": dict(depth=1, num_classes=10, width=32, num_heads=2,
                       mlp_dim=64, stem_widths=(8, 16, 32)),
    "elementwise": dict(variant="A", num_classes=10),
    "vgg_control": dict(num_classes=10),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_every_model_follows_the_contract(name):
  # Shapes only (jax.eval_shape); numerics are tested per model elsewhere.
  assert sorted(TINY) == models.names()
  m = configlib.build_model({"model_name": name, "model": TINY[name]})
  x = jax.ShapeDtypeStruct((2, 16, 16, 3), jnp.float32)
  v = jax.eval_shape(lambda x: m.init(jax.random.key(0), x, train=False), x)
  mutable = ["intermediates"] + (["batch_stats"] if "batch_stats" in v else [])
  y, st = jax.eval_shape(
      lambda v, x: m.apply(v, x, train=True,
                           rngs={"dropout": jax.random.key(1)}, mutable=mutable), v, x)
  assert y.shape == (2, 10) and y.dtype == jnp.float32
  assert st["intermediates"]["pre_logits"][0].shape[0] == 2
  y = jax.eval_shape(lambda v, x: m.apply(v, x, train=False), v, x)
  assert y.shape == (2, 10)
