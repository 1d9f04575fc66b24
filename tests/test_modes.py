"""One mode table drives every path: a mode added to ``softattn.modes.MODES``
alone (no edit of core, chunked or pallas) gives dense, chunked and fused
weights, outputs and gradients that agree with a float64 reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import dot_product_attention, modes
from softattn.normalizers.core import Normalizer

B, LQ, LK, H, D = 1, 12, 20, 2, 8


# A toy mode: w = |t| / (sum |t| + eps), its fused backward rule included.
def _abs_block(m, t, valid, fixed):
  g = modes.masked(valid, jnp.abs(t), 0.0)
  return m, None, g, jnp.sum(g, axis=-1, keepdims=True)


def _abs_finish(m, l, eps):
  z = l + eps
  return z, z, z


def _abs_grad(t, valid, dp, z, _, di):
  w = modes.masked(valid, jnp.abs(t), 0.0) / z
  return w, modes.masked(valid, jnp.sign(t) * (dp - di) / z, 0.0)


ABS = modes.Mode(modes.NEG, _abs_block, _abs_finish, _abs_grad,
                 streams="plain sums of |t|")


@pytest.fixture
def abs_norm(monkeypatch):
  monkeypatch.setitem(modes.MODES, "abs_ratio", ABS)
  return Normalizer(name="abs_ratio", mode="abs_ratio", needs="none",
                    defaults=dict(eps=1e-3), eps_param="eps",
                    transform=lambda s, stats, *, eps: s - 0.25)


def _reference(q, k, v, mask, eps=1e-3):
  s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D) - 0.25
  g = np.where(mask, np.abs(s), 0.0)
  w = g / (g.sum(-1, keepdims=True) + eps)
  return np.einsum("bhqk,bkhd->bqhd", w, v)


def test_a_new_mode_is_one_table_entry(abs_norm):
  ks = jax.random.split(jax.random.PRNGKey(0), 3)
  q, k, v = (jax.random.normal(kk, (B, n, H, D)) for kk, n in
             zip(ks, (LQ, LK, LK)))
  mask = (jnp.arange(LK) < 15)[None, None, None, :]
  want = _reference(*(np.asarray(x, np.float64) for x in (q, k, v)),
                    np.asarray(mask))

  def run(impl):
    def loss(q, k, v):
      out = dot_product_attention(q, k, v, normalizer=abs_norm, mask=mask,
                                  implementation=impl, chunk_size=8)
      return jnp.sum(jnp.sin(out)), out
    (_, out), grads = jax.jit(jax.value_and_grad(
        loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return out, grads

  dense_out, dense_grads = run("dense")
  np.testing.assert_allclose(dense_out, want, atol=1e-5)
  for impl in ("chunked", "pallas"):
    out, grads = run(impl)
    np.testing.assert_allclose(out, want, atol=1e-5, err_msg=impl)
    for a, b in zip(grads, dense_grads):
      np.testing.assert_allclose(a, b, atol=2e-5, err_msg=impl)


def test_unknown_mode_is_rejected():
  with pytest.raises(ValueError, match="mode 'abs_ratio' is not one of"):
    Normalizer(name="x", mode="abs_ratio", needs="none", defaults={},
               transform=lambda s, stats: s)


def test_dense_weights_are_the_single_block_case():
  """``weights`` of a row equals ``output`` of one streamed block with
  ``v = I`` (each key its own value column), for every mode."""
  t = jax.random.normal(jax.random.PRNGKey(3), (3, 6)) * 2.0
  valid = jnp.asarray(np.random.default_rng(0).random((3, 6)) < 0.7)
  for name in modes.MODES:
    w = modes.weights(name, t, valid, 1e-3)
    carry = modes.init(name, (3,), 6, jnp.float32)
    for lo in (0, 2, 4):   # three key blocks of 2
      carry = modes.update(name, carry, t[:, lo:lo + 2], valid[:, lo:lo + 2],
                           jnp.eye(6)[lo:lo + 2])
    out, _, _ = modes.output(name, carry, 1e-3)
    np.testing.assert_allclose(out, w, rtol=1e-5, atol=1e-6, err_msg=name)
    assert np.all(np.asarray(w)[~np.asarray(valid)] == 0.0), name
