"""Stick-breaking on the fused TPU kernels (``softattn/pallas/tpu/stick.py``).

``tests/test_pallas.py`` runs stick_breaking and ``prenorm(stick_breaking)``
through the Pallas interpreter like every fused normalizer (key mask,
causal, ragged, f32 and bf16, one and two heads per block), with 16-key
blocks: one triangular chunk per block. Here: the MXU cumulative sum itself,
and key blocks of 256 (two 128-lane chunks carried into each other) with
a ragged tail, causal and masked.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import dot_product_attention
from softattn.pallas.tpu import stick


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", [16, 384])
def test_scan_is_an_exclusive_cumulative_sum(reverse, n):
  """Three bf16 pieces carry an f32 operand exactly through the 0/1
  matmul (to f32 summation order); two, to ~2^-16 of each term."""
  x = jax.random.normal(jax.random.PRNGKey(0), (8, n)) * 5.0
  x64 = np.asarray(x, np.float64)
  if reverse:
    want = np.cumsum(x64[:, ::-1], axis=1)[:, ::-1] - x64
  else:
    want = np.cumsum(x64, axis=1) - x64
  scale = np.cumsum(np.abs(x64), axis=1)[:, -1:]
  for passes, tol in ((3, 1e-6), (2, 2e-5)):
    excl, total = stick.scan(x, reverse, passes)
    assert excl.shape == x.shape and total.shape == (8, 1)
    np.testing.assert_allclose(total, x64.sum(1, keepdims=True),
                               atol=1e-6 * scale.max())
    assert np.max(np.abs(np.asarray(excl) - want) / scale) < tol, passes


@pytest.mark.parametrize("causal", [False, True])
def test_wide_blocks_equal_dense(causal):
  """``bk = 256``: the in-block scans run over two 128-lane chunks; 300
  keys end in a ragged block, and the key mask leaves holes."""
  b, h, d, lk = 1, 2, 8, 300
  lq = lk if causal else 24
  ks = jax.random.split(jax.random.PRNGKey(3), 4)
  q, k, v = (jax.random.normal(kk, (b, n, h, d))
             for kk, n in zip(ks, (lq, lk, lk)))
  mask = None if causal else jax.random.bernoulli(ks[3], 0.8, (b, 1, 1, lk))

  def loss(impl, q, k, v):
    kw = dict(chunk_size=256, query_chunk_size=128) if impl == "pallas" else {}
    out = dot_product_attention(q, k, v, normalizer="stick_breaking",
                                mask=mask, is_causal=causal,
                                implementation=impl, **kw)
    return jnp.sum(jnp.cos(out)), out

  res = {}
  for impl in ("dense", "pallas"):
    fn = jax.jit(jax.value_and_grad(lambda *a, i=impl: loss(i, *a),
                                    argnums=(0, 1, 2), has_aux=True))
    (_, out), grads = fn(q, k, v)
    res[impl] = [out, *grads]
  for label, got, ref in zip(["out", "dq", "dk", "dv"], res["pallas"],
                             res["dense"]):
    scale = 1.0 + float(jnp.max(jnp.abs(ref)))
    assert float(jnp.max(jnp.abs(got - ref))) <= 2e-5 * scale, label


def test_refused_on_gpu_with_the_chunked_path_named(monkeypatch):
  from softattn.pallas import wrapper  # noqa: PLC0415
  monkeypatch.setattr(wrapper, "target_platform", lambda: "gpu")
  q = jnp.zeros((1, 8, 1, 8))
  with pytest.raises(ValueError, match="TPU kernels only.*'chunked'"):
    dot_product_attention(q, q, q, normalizer="stick_breaking",
                          implementation="pallas")
