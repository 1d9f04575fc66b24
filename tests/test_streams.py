"""Streamed whole-row normalizers (``softattn.streams``): the chunked path's
threshold search (sparsemax, entmax15) and reverse scan (stick_breaking)
equal the dense sort-based / cumulative results, outputs and q/k/v
gradients, under a per-query mask with a fully masked row, a causal mask and
lengths that are not multiples of the blocks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import dot_product_attention
from softattn import normalizers as N

B, L, H, D = 2, 29, 2, 8
CHUNK, QCHUNK = 8, 5
TIGHT = "(tol=1e-13)"  # float64: converge to the last bits


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


def _inputs(dtype=jnp.float64, scale=2.0):
  ks = jax.random.split(jax.random.PRNGKey(0), 3)
  q, k, v = (jax.random.normal(kk, (B, L, H, D), dtype) for kk in ks)
  rng = np.random.default_rng(1)
  mask = rng.random((B, 1, L, L)) < 0.8
  mask[0, 0, 7] = False                 # a fully masked query row
  return q * scale, k, v, mask


def _run(impl, name, q, k, v, mask, causal=True):
  def loss(q, k, v):
    o = dot_product_attention(q, k, v, normalizer=name, mask=mask,
                              is_causal=causal, implementation=impl,
                              chunk_size=CHUNK, query_chunk_size=QCHUNK)
    return jnp.sum(o * jnp.cos(o)), o
  (_, out), grads = jax.jit(jax.value_and_grad(
      loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
  return [np.asarray(x) for x in (out, *grads)]


def _rel(a, b):
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30))


@pytest.mark.parametrize("name", ["sparsemax" + TIGHT, "entmax15" + TIGHT,
                                  "stick_breaking",
                                  f"prenorm(entmax15{TIGHT})"])
def test_chunked_stream_equals_dense_float64(name):
  q, k, v, mask = _inputs()
  dense = _run("dense", name, q, k, v, mask)
  chunked = _run("chunked", name, q, k, v, mask)
  assert np.all(chunked[0][0, 7] == 0.0)   # the empty row stays 0, no NaN
  for label, a, b in zip(("out", "dq", "dk", "dv"), dense, chunked):
    assert _rel(a, b) <= 1e-12, (label, _rel(a, b))


def test_threshold_passes_are_a_parameter():
  """One Newton pass is not enough on these rows, the default is: the
  parameter is what bounds the search (the dense path ignores it)."""
  q, k, v, mask = _inputs(scale=0.5)   # flat rows: the slowest to converge
  dense = _run("dense", "entmax15", q, k, v, mask, causal=False)[0]
  errs = {n: _rel(dense, _run("chunked", f"entmax15(max_passes={n})", q, k,
                              v, mask, causal=False)[0]) for n in (1, 20)}
  assert errs[20] <= 1e-9 < errs[1], errs


@pytest.mark.parametrize("spec,match", [
    ("sparsemax(max_passes=0)", r"max_passes=0 is invalid; it must be an integer in \[1, inf\)"),
    ("entmax15(max_passes=2.5)", r"max_passes=2.5 is invalid"),
    ("sparsemax(tol=0)", r"tol=0 is invalid; it must be in \(0, inf\)"),
])
def test_stream_parameters_are_checked(spec, match):
  with pytest.raises(ValueError, match=match):
    N.get(spec)


def test_rowwise_without_a_stream_is_dense_only():
  plain = N.Normalizer(name="rowsum", mode="rowwise", needs="none",
                       defaults={}, transform=None,
                       row_fn=lambda s, valid: jnp.where(valid, 1.0, 0.0))
  assert not plain.streamable and N.get("sparsemax").streamable
  q = jnp.zeros((1, 8, 1, 8))
  with pytest.raises(ValueError, match="declares no stream.*'dense'"):
    dot_product_attention(q, q, q, normalizer=plain, implementation="chunked")
