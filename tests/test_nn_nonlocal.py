"""NonLocalBlock2D: scaled NL linear == dense, modes, inits, options."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn.nn.nonlocal_block import NonLocalBlock2D, sinusoidal_2d

X = jnp.asarray(np.random.RandomState(0).randn(2, 6, 6, 8), jnp.float32)


def _nonzero_bn(v):
  """The block starts as the identity (BN gamma = 0); open it for tests."""
  p = jax.tree.map(lambda a: a, v["params"])
  p["bn"]["scale"] = jnp.ones_like(p["bn"]["scale"])
  return {**v, "params": p}


@pytest.mark.parametrize("mode", ["base", "magnitude", "direction"])
def test_scaled_linear_path_equals_dense_path(mode):
  kw = dict(heads=2, normalizer="scaled", mode=mode, embed_init="he",
            posenc=True)
  lin = NonLocalBlock2D(implementation="linear", **kw)
  dense = NonLocalBlock2D(implementation="dense", **kw)
  v = _nonzero_bn(lin.init(jax.random.key(0), X))
  y_lin, y_dense = lin.apply(v, X), dense.apply(v, X)
  assert float(jnp.abs(y_lin - X).max()) > 1e-3  # the block does something
  np.testing.assert_allclose(y_lin, y_dense, rtol=1e-4, atol=1e-5)
  # ...and so are the gradients.
  g = lambda m: jax.grad(lambda p: m.apply({**v, "params": p}, X).sum())(
      v["params"])
  for a, b in zip(jax.tree.leaves(g(lin)), jax.tree.leaves(g(dense))):
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def test_scaled_block_matches_equation_3():
  m = NonLocalBlock2D(heads=1, normalizer="scaled", embed_init="he",
                      use_bias=False)
  v = _nonzero_bn(m.init(jax.random.key(0), X))
  p = v["params"]
  flat = X.reshape(2, 36, 8)
  th, ph, g = (flat @ p[n]["kernel"][0, 0] for n in ("theta", "phi", "g"))
  y = th @ (jnp.swapaxes(ph, 1, 2) @ g) / np.sqrt(36 * 8)
  z = (y @ p["W_z"]["kernel"][0, 0])
  z = z / np.sqrt(1 + 1e-5)  # BN in eval mode: mean 0, var 1 at init
  np.testing.assert_allclose(m.apply(v, X), X + z.reshape(X.shape),
                             rtol=1e-4, atol=1e-5)


def test_softmax_block_weights_are_distributions_and_init_identity():
  m = NonLocalBlock2D(heads=4, normalizer="softmax")
  v = m.init(jax.random.key(0), X)
  np.testing.assert_allclose(m.apply(v, X), X)  # BN gamma = beta = 0
  _, st = m.apply(v, X, mutable=["attention_weights"])
  w = st["attention_weights"]["weights"][0]
  assert w.shape == (2, 4, 36, 36)
  np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)


def test_inits_and_subsampling():
  v = NonLocalBlock2D(embed_init="zeros").init(jax.random.key(0), X)
  assert float(jnp.abs(v["params"]["theta"]["kernel"]).max()) == 0.0
  v = NonLocalBlock2D(embed_init="normal").init(jax.random.key(0), X)
  assert abs(float(v["params"]["phi"]["kernel"].std()) - 0.01) < 0.005
  v = NonLocalBlock2D(embed_init="he").init(jax.random.key(0), X)
  assert abs(float(v["params"]["g"]["kernel"].std()) - np.sqrt(2 / 8)) < 0.2
  m = NonLocalBlock2D(heads=2, subsample=2)
  v = _nonzero_bn(m.init(jax.random.key(0), X))
  _, st = m.apply(v, X, mutable=["attention_weights"])
  assert st["attention_weights"]["weights"][0].shape == (2, 2, 36, 9)
  with pytest.raises(ValueError, match="valid: he, normal, zeros"):
    NonLocalBlock2D(embed_init="xavier").init(jax.random.key(0), X)
  with pytest.raises(ValueError, match="divisible by heads"):
    NonLocalBlock2D(heads=3).init(jax.random.key(0), X)


@pytest.mark.parametrize("normalizer", ["scaled", "softmax"])
def test_bf16_forward_jitted(normalizer):
  # bf16 parameters and inputs, as a bf16 compute_dtype run casts them.
  m = NonLocalBlock2D(heads=2, normalizer=normalizer, dtype=jnp.bfloat16)
  v = _nonzero_bn(m.init(jax.random.key(0), X))
  vb = jax.tree.map(lambda a: a.astype(jnp.bfloat16), v)
  y = jax.jit(m.apply)(vb, X.astype(jnp.bfloat16))
  assert y.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(y)))
  ref = jax.jit(NonLocalBlock2D(heads=2, normalizer=normalizer).apply)(v, X)
  np.testing.assert_allclose(np.asarray(y, np.float32), ref, atol=0.1,
                             rtol=0.05)


def test_position_encoding_distinguishes_positions():
  pe = np.asarray(sinusoidal_2d(4, 5, 8)).reshape(20, 8)
  assert len({tuple(np.round(r, 5)) for r in pe}) == 20
  with pytest.raises(ValueError, match="divisible by 4"):
    sinusoidal_2d(2, 2, 6)
