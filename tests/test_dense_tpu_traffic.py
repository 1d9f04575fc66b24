"""The dense softmax path costs XLA:TPU no more HBM traffic than plain
``jax.nn.softmax`` attention (compiled here for a v5e with libtpu).

Why a test: a select on the row max (once ``where(isfinite(max), max, 0)``)
made the TPU compiler sum ``exp(s - max)`` in a second pass over the
``[B, H, L, L]`` scores, 358 MB more per ViT-B/16 step at 16 images per
chip. The CPU backend prefers the select (``modes._cpu_row``), so each
platform gets its own form of the same values.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import SingleDeviceSharding

from softattn import dot_product_attention, topology, xla_cost
from tests import libtpu_required

SHAPE = (16, 196, 12, 64)   # ViT-B/16's attention at 16 images per chip


def _plain(q, k, v, mask=None):
  s = jnp.einsum("bqhd,bkhd->bhqk", q, k,
                 preferred_element_type=jnp.float32) / 8.0
  if mask is not None:
    s = jnp.where(mask, s, jnp.finfo(s.dtype).min)
  w = jax.nn.softmax(s, axis=-1)
  return jnp.einsum("bhqk,bkhd->bqhd", w.astype(v.dtype), v,
                    preferred_element_type=jnp.float32).astype(v.dtype)


def _ours(q, k, v, mask=None):
  return dot_product_attention(q, k, v, normalizer="softmax", mask=mask,
                               implementation="dense")


def _tpu_bytes(f, *args):
  grad = jax.jit(jax.grad(
      lambda q, k, v, *m: jnp.sum(f(q, k, v, *m).astype(jnp.float32)),
      argnums=(0, 1, 2)))
  compiled = grad.lower(*args).compile(compiler_options={
      topology.CHIPS["v5e"].vmem_staging_flag: False})
  return xla_cost.cost_analysis(compiled)["bytes accessed"]


@pytest.mark.parametrize("masked", [False, True])
def test_dense_softmax_fwd_bwd_traffic_matches_plain_softmax_on_tpu(masked):
  libtpu_required.require_libtpu()
  device = SingleDeviceSharding(topology.abstract_devices("v5e-1")[0])
  x = jax.ShapeDtypeStruct(SHAPE, jnp.bfloat16, sharding=device)
  args = (x, x, x)
  if masked:
    args += (jax.ShapeDtypeStruct((SHAPE[0], 1, 1, SHAPE[1]), jnp.bool_,
                                  sharding=device),)
  ours, plain = _tpu_bytes(_ours, *args), _tpu_bytes(_plain, *args)
  assert ours <= 1.01 * plain, (ours / 1e6, plain / 1e6)


def test_a_fully_masked_row_has_zero_weights_and_finite_gradients():
  q = jax.random.normal(jax.random.key(0), (2, 5, 1, 4))
  mask = np.ones((2, 1, 1, 5), bool)
  mask[1] = False                          # batch element 1: no valid key
  out, w = dot_product_attention(q, q, q, mask=mask, implementation="dense",
                                 return_weights=True)
  assert np.all(np.asarray(w)[1] == 0) and np.all(np.asarray(out)[1] == 0)
  g = jax.grad(lambda x: jnp.sum(dot_product_attention(
      x, x, x, mask=mask, implementation="dense") ** 2))(q)
  assert np.all(np.isfinite(g))
