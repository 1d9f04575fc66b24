"""Dense attention as ``dot_product_attention(implementation="dense")``
computes it, in a module of its own so that the GPU backend's device check
(``softattn/pallas/gpu/device_check.py``) compares the fused kernels with
exactly the user's dense path without importing ``softattn.attention``
(which imports the backend).
"""

from __future__ import annotations

import jax.numpy as jnp

from softattn.modes import soft_cap


def causal_mask(q_len, k_len, q_offset=0, k_offset=0):
  """``[Lq, Lk]`` bool: key ``j`` visible to query ``i`` (offsets: where
  each block starts)."""
  qi = jnp.arange(q_len)[:, None] + q_offset
  ki = jnp.arange(k_len)[None, :] + k_offset
  return ki <= qi


def compute_dtype(x):
  """float32 for low-precision inputs, the input's dtype otherwise."""
  return jnp.promote_types(x.dtype, jnp.float32)


def scores(query, key, scale):
  # The scale goes on the query, as in flax's dot_product_attention: a
  # multiply on the [B, H, Lq, Lk] scores made XLA:TPU sum exp(s - max) in a
  # fusion of its own, one more pass over the scores per layer (0.49 GB of
  # a ViT-B/16 step's 15.1 GB at 16 images per v5e chip; benchmarks/README.md,
  # "The pod step against a plain one"). The product is rounded once per
  # element from float32, so a scale that bf16 cannot hold is not rounded
  # itself.
  q = (query.astype(compute_dtype(query)) * scale).astype(query.dtype)
  return jnp.einsum("bqhd,bkhd->bhqk", q, key,
                    preferred_element_type=compute_dtype(query))


def dense_attention(query, key, value, norm, p, mask, bias, scale, causal,
                    logits_soft_cap=None):
  """``(out [B, Lq, H, Dv], weights [B, H, Lq, Lk])``; ``p``: the
  normalizer's resolved parameters, ``mask``/``bias``: 4-D or None."""
  s = soft_cap(scores(query, key, scale), logits_soft_cap)
  if bias is not None:
    s = s + bias.astype(s.dtype)
  if causal:
    c = causal_mask(query.shape[1], key.shape[1])
    mask = c if mask is None else jnp.logical_and(mask, c)
  w = norm(s, mask=mask, **p)
  out = jnp.einsum("bhqk,bkhd->bqhd", w.astype(value.dtype), value,
                   preferred_element_type=s.dtype)
  return out.astype(value.dtype), w
