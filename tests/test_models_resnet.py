"""ResNet family: published parameter counts, shapes, NL-block insertion."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import models
from softattn.models.resnet import NLConfig, PreResNet, ResNet, WideResNet


def n_params(model, shape):
  v = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros(shape))
  return sum(int(np.prod(a.shape)) for a in jax.tree.leaves(v["params"]))


CIFAR = (1, 32, 32, 3)


def test_published_parameter_counts():
  # He et al. 2016: ResNet-56 0.85M, ResNet-110 1.7M (CIFAR-10).
  pr56 = n_params(PreResNet(depth=56), CIFAR)
  assert abs(pr56 - 0.85e6) < 0.01e6, pr56
  pr110 = n_params(PreResNet(depth=110), CIFAR)
  assert abs(pr110 - 1.7e6) < 0.05e6, pr110
  # Zagoruyko & Komodakis 2016: WRN-28-10 36.5M.
  wrn = n_params(WideResNet(depth=28, widen=10), CIFAR)
  assert abs(wrn - 36.5e6) < 0.05e6, wrn
  # torchvision's exact ImageNet counts.
  r50 = ResNet(depth=50, num_classes=1000)
  assert n_params(r50, (1, 224, 224, 3)) == 25_557_032
  r152 = ResNet(depth=152, num_classes=1000)
  assert n_params(r152, (1, 224, 224, 3)) == 60_192_808


@pytest.mark.parametrize("name,kw,shape", [
    ("preresnet", dict(depth=8), (2, 8, 8, 3)),
    ("preresnet", dict(depth=11, num_classes=7), (2, 8, 8, 3)),  # 9n+2
    ("preresnet", dict(depth=50, num_classes=5), (2, 56, 56, 3)),
    ("wrn", dict(depth=10, widen=1, dropout=0.3), (2, 8, 8, 3)),
    ("resnet", dict(depth=101, num_classes=4), (2, 64, 64, 3)),
])
def test_shapes_train_and_eval(name, kw, shape):
  # Shapes only (jax.eval_shape): nothing is computed or materialised.
  m = models.model_class(name)(**kw)
  x = jax.ShapeDtypeStruct(shape, jnp.float32)
  v = jax.eval_shape(m.init, jax.random.key(0), x)
  y, st = jax.eval_shape(
      lambda v, x: m.apply(v, x, train=True,
                           rngs={"dropout": jax.random.key(1)}, mutable=["batch_stats", "intermediates"]), v, x)
  nc = kw.get("num_classes", 10)
  assert y.shape == (2, nc)
  assert st["intermediates"]["pre_logits"][0].ndim == 2
  assert jax.tree.structure(st["batch_stats"]) == jax.tree.structure(
      v["batch_stats"])
  assert jax.eval_shape(m.apply, v, x).shape == (2, nc)


def test_nl_blocks_inserted_in_second_stage():
  m = PreResNet(depth=56,
                nl_blocks=dict(count=3, heads=4, normalizer="scaled"))
  v = jax.eval_shape(m.init, jax.random.key(0), jnp.zeros(CIFAR))
  assert sorted(k for k in v["params"] if "_nl" in k) == [
      "stage2_nl1", "stage2_nl4", "stage2_nl7"]
  nl = v["params"]["stage2_nl1"]
  assert nl["theta"]["kernel"].shape == (1, 1, 32, 32)
  # Swapping the NL normalizer keeps the parameter count.
  counts = {n_params(PreResNet(depth=20, nl_blocks=dict(
      count=2, normalizer=s)), CIFAR) for s in ["softmax", "scaled",
                                                 "relu_seqlen"]}
  assert len(counts) == 1
  # heads=0 is the no-NL baseline (Table 3's first column).
  assert NLConfig.make(dict(heads=0)) is None
  base = n_params(PreResNet(depth=20), CIFAR)
  assert n_params(PreResNet(depth=20,
                            nl_blocks=dict(heads=0)), CIFAR) == base


def test_nl_block_starts_as_identity_and_diagnostics_flow():
  m = PreResNet(depth=8, num_classes=3,
                nl_blocks=dict(count=1, heads=2, stage=1))
  x = jnp.asarray(np.random.RandomState(0).randn(2, 8, 8, 3), jnp.float32)
  v = jax.jit(m.init)(jax.random.key(0), x)
  plain = PreResNet(depth=8, num_classes=3)
  pv = {c: {k: t for k, t in v[c].items() if "_nl" not in k} for c in v}
  np.testing.assert_allclose(jax.jit(m.apply)(v, x),
                             jax.jit(plain.apply)(pv, x), atol=1e-5)
  _, st = jax.jit(lambda v, x: m.apply(v, x, mutable=["diagnostics"]))(v, x)
  assert {"score_std", "attn_entropy", "grad_saturation", "score_q50",
          "lgrad_q50"} <= set(st["diagnostics"]["stage1_nl0"])


def test_nl_positions_are_distinct_and_spread():
  assert NLConfig(count=3).positions(9) == {1, 4, 7}
  assert NLConfig(count=3).positions(3) == {0, 1, 2}
  assert NLConfig(count=1).positions(1) == {0}
  assert len(NLConfig(count=5).positions(18)) == 5


def test_bad_configs_raise():
  with pytest.raises(ValueError, match="6n\\+2"):
    n_params(PreResNet(depth=57), CIFAR)
  with pytest.raises(ValueError, match="unknown nl_blocks field"):
    NLConfig.make(dict(cnt=3))
  with pytest.raises(ValueError, match="valid: 18, 34, 50"):
    n_params(ResNet(depth=51), CIFAR)
  with pytest.raises(ValueError, match="out of range 1..3"):
    n_params(PreResNet(depth=20, nl_blocks=dict(stage=4)),
             CIFAR)
  with pytest.raises(ValueError, match="exceeds"):
    n_params(PreResNet(depth=20, nl_blocks=5), CIFAR)
