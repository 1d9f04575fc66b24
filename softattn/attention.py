"""``dot_product_attention`` with any normalizer: dense, chunked and linear paths.

Layout ``[batch, length, heads, head_dim]`` as ``jax.nn.dot_product_attention``.

Paths (``implementation=``):

* ``"dense"`` materialises the ``[B, H, Lq, Lk]`` scores and weights; works for
  every normalizer and can return the weights.
* ``"chunked"`` never holds more than a ``[B, H, chunk, Lk]`` slab per step,
  forward *and* backward: queries are processed in blocks of
  ``query_chunk_size`` under ``jax.checkpoint`` (so the backward pass keeps only
  one block's residuals), and within a block keys are streamed in blocks of
  ``chunk_size``, accumulating the output as each normalizer's mode allows
  (running max for ``exp``/``softpick``, plain sums for ``ratio``/``pointwise``;
  a first streaming pass gathers the per-query mean/variance that NormSoftmax,
  LogitNorm, NAP and ``prenorm`` need, merged with Chan's formula). Peak memory
  is O(L * chunk) instead of O(L^2). Normalizers whose weights depend on the
  whole sorted or ordered row stream in several passes (``softattn.streams``):
  ``sparsemax`` and ``entmax15`` find their threshold by streamed Newton
  passes (at most ``max_passes``, to ``tol``) and then accumulate;
  ``stick_breaking`` scans key blocks last to first. A ``rowwise`` normalizer
  that declares no ``stream`` raises ValueError.
* ``"linear"`` for normalizers linear in the scores (``scaled``,
  ``relu_seqlen(act='identity')``): ``coef(n) * scale * Q (K^T V)``, cost
  O(L d^2). Needs a mask that depends on the key only (no per-query mask, no
  bias, not causal) and no ``logits_soft_cap``.
* ``"pallas"``: fused kernels (``softattn.pallas``) for every normalizer
  whose mode is in ``softattn.modes``, and on TPU ``sparsemax``/``entmax15``
  as passes over the keys (``pallas/common/streams.py``) and
  ``stick_breaking`` in kernels of its own (``pallas/tpu/stick.py``): score
  tiles stay in VMEM (TPU, Mosaic) or registers/shared memory (GPU, Triton:
  ``softattn.pallas.gpu.triton``, which also needs power-of-two head dims >= 16
  and no ``erf`` in the transform), forward and backward. Takes a key mask
  and ``is_causal`` (no bias, no per-query mask);
  ``chunk_size``/``query_chunk_size`` override its block sizes. On CPU it
  runs the TPU kernels in the Pallas interpreter (slow; for tests). Takes
  ``logits_soft_cap`` (each tile's scores capped in the kernel, the cap's
  derivative multiplied into ``dS`` in the backward: ``tile.scores``).
* ``"auto"`` (default): ``linear`` when it applies and is cheaper
  (``Lq * Lk > (Lq + Lk) * d``); else, on TPU, ``pallas`` when it supports the
  normalizer (one-pass modes only, no ``stream``) and mask and the scores are larger than
  one 128 x 128 tile (``Lq * Lk > AUTO_PALLAS_MIN_SCORES``), and on GPU
  when the GPU backend it would run on supports the call (``_fused_on_gpu``,
  ``pallas.gpu.backend``) and the scores exceed 336 x 336
  (``AUTO_PALLAS_MIN_SCORES_GPU``);
  else ``chunked`` when the
  normalizer streams and one (batch, head) slice of the dense scores would
  exceed 16 MiB (``Lq * Lk > 2048**2``: long sequences); else ``dense``.
  ``return_weights=True`` always uses ``dense``. With ``logits_soft_cap``
  it picks by the same rule, ``linear`` excepted.

  Why the Pallas threshold: compiled for a v5e (B=16, H=12, D=64,
  forward+backward, softmax; the larger of FLOPs / peak and HBM bytes with
  VMEM staging off / bandwidth; ``benchmarks/README.md``), dense is the
  cheaper program at L = 16, 49, 64 and 128 (1.1-1.9x), the fused kernels
  from L = 196 (ViT-B/16's tokens: 1.5x in bf16, 1.2x in f32) to 4096
  (7-8x). The rule looks at the sequence lengths, not the batch. On GPU, an
  H200 (bf16, D=128, forward+backward, the Triton kernels;
  ``benchmarks/gpu_auto_rule.py`` reads the committed runs): dense was
  faster at L = 196 (relu_seqlen, by 11 %), the fused kernels at 576, 1024
  and 4096 (sigmoid at 576 within 3 %: a tie), and only fused and chunked
  run at 16384; the threshold lies between 196 and 576. The Mosaic GPU
  kernels are untimed and share it.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from softattn import normalizers as norms
from softattn.dense import compute_dtype as _compute_dtype
from softattn.dense import dense_attention as _dense
from softattn.modes import check_soft_cap
from softattn.normalizers.core import Normalizer

IMPLEMENTATIONS = ("auto", "dense", "chunked", "linear", "pallas")
AUTO_CHUNK_MIN_SCORES = 2048 * 2048  # per (batch, head)
# On TPU, scores above one 128 x 128 tile go to the fused kernels: measured
# crossover, see the module docstring.
AUTO_PALLAS_MIN_SCORES = 128 * 128
# On GPU, fused from more than 336 x 336 scores: on an H200 (bf16, D=128,
# forward+backward; benchmarks/gpu_auto_rule.py reads the committed runs)
# dense was faster at L = 196 and the fused kernels at 576 and up; 336 is
# the two lengths' geometric mean (between them: not measured).
AUTO_PALLAS_MIN_SCORES_GPU = 336 * 336
DEFAULT_CHUNK = 512


def _check_shapes(query, key, value):
  for name, x in (("query", query), ("key", key), ("value", value)):
    if x.ndim != 4:
      raise ValueError(f"{name} must be [batch, length, heads, head_dim], got "
                       f"shape {x.shape}")
  b, _, h, d = query.shape
  if key.shape[0] != b or key.shape[2] != h or key.shape[3] != d:
    raise ValueError(f"query {query.shape} and key {key.shape} must agree on "
                     f"batch, heads and head_dim")
  if value.shape[:3] != key.shape[:3]:
    raise ValueError(f"key {key.shape} and value {value.shape} must agree on "
                     f"batch, length and heads")


def _as_4d(x, name, shape):
  """Broadcast-checks ``x`` (mask/bias) against ``shape`` = [B, H, Lq, Lk]."""
  if x is None:
    return None
  x = jnp.asarray(x)
  if x.ndim > 4:
    raise ValueError(f"{name} has {x.ndim} dims; expected at most 4 "
                     f"broadcastable to [batch, heads, q_len, k_len] {shape}")
  x = x.reshape((1,) * (4 - x.ndim) + x.shape)
  try:
    jnp.broadcast_shapes(x.shape, shape)
  except ValueError:
    raise ValueError(f"{name} shape {x.shape} does not broadcast to [batch, "
                     f"heads, q_len, k_len] = {shape}") from None
  return x


def dot_product_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    *,
    normalizer: str | Normalizer = "softmax",
    normalizer_params: Mapping[str, Any] | None = None,
    mask: jax.Array | None = None,
    bias: jax.Array | None = None,
    scale: float | None = None,
    is_causal: bool = False,
    implementation: str = "auto",
    chunk_size: int | None = None,
    query_chunk_size: int | None = None,
    return_weights: bool = False,
    logits_soft_cap: float | None = None,
):
  """Attention ``o_i = sum_j w_ij v_j`` with ``w = normalizer(scale * q.k + bias)``
  (``normalizer(cap(scale * q.k) + bias)`` with ``logits_soft_cap``).

  Args:
    query: ``[batch, q_len, heads, head_dim]``.
    key: ``[batch, k_len, heads, head_dim]``.
    value: ``[batch, k_len, heads, v_dim]``.
    normalizer: registry name, spec string or ``Normalizer`` (see
      ``softattn.normalizers.names()``).
    normalizer_params: extra parameters for the normalizer, e.g. learnable ones
      (``{"w": w}`` for ``normsoftmax_learnable``); may be traced arrays.
    mask: boolean, broadcastable to ``[batch, heads, q_len, k_len]``; False
      keys get weight exactly 0 and do not count in ``n``/mean/std.
    bias: additive score bias, broadcastable like ``mask``. Drop keys with
      ``mask``, not a ``-inf`` bias: on the dense path a row whose every
      score is ``-inf`` gives NaN softmax weights (as ``jax.nn.softmax``),
      while a fully masked row gives zeros.
    scale: score scale; default ``normalizer.default_scale`` or, if that is
      None, ``1/sqrt(head_dim)`` (NormSoftmax family: 1, as the paper).
    is_causal: apply a causal mask (computed per block, never materialised by
      the chunked path).
    implementation: ``"auto" | "dense" | "chunked" | "linear" | "pallas"``
      (module doc).
    chunk_size: key block size of the chunked path (default 512) or of the
      pallas kernels (default: ``softattn.pallas.block_sizes``).
    query_chunk_size: query block size of the chunked/pallas path (default
      ``chunk_size``).
    return_weights: also return the ``[batch, heads, q_len, k_len]`` weights
      (dense path only).
    logits_soft_cap: ``c > 0`` bounds the scaled scores to ``(-c, c)``:
      ``s = c * tanh(scale * q.k / c)`` (Gemma 2; ``softcap`` of
      FlashAttention 2/3, ``attn_logits_soft_cap`` of splash attention).
      Order: scale, cap, bias, mask. The bias is added after the cap,
      uncapped (as FlashAttention adds ALiBi), and the normalizer sees
      ``cap(scale * q.k) + bias`` whole, its row statistics (NormSoftmax's
      mean and std) included; masked keys get weight 0 as without a cap. None (default): no cap, the program unchanged. Paths: dense and
      chunked (autodiff differentiates the cap, forward and backward) and
      pallas (in the kernels); not linear (the weights are no longer linear
      in the scores), which ``auto`` then never picks.

  Returns:
    ``[batch, q_len, heads, v_dim]`` in ``value.dtype``, and the weights if
    ``return_weights``.
  """
  query, key, value = map(jnp.asarray, (query, key, value))
  _check_shapes(query, key, value)
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"unknown implementation {implementation!r}; valid: "
                     f"{', '.join(IMPLEMENTATIONS)}")
  cap = check_soft_cap(logits_soft_cap)
  norm = norms.get(normalizer)
  b, lq, h, d = query.shape
  lk = key.shape[1]
  p = norm.resolve(normalizer_params, head_dim=d)
  if scale is None:
    scale = norm.default_scale if norm.default_scale is not None else (
        1.0 / math.sqrt(d))
  shape = (b, h, lq, lk)
  mask = _as_4d(mask, "mask", shape)
  bias = _as_4d(bias, "bias", shape)

  impl = implementation
  if return_weights and impl not in ("auto", "dense"):
    raise ValueError("return_weights=True needs implementation='dense' (the "
                     "other paths never materialise the weights)")
  if impl == "auto":
    impl = _auto(norm, shape, d, mask, bias, is_causal, return_weights, p,
                 dv=value.shape[-1], blocks=(chunk_size, query_chunk_size),
                 logits_soft_cap=cap, dtype=query.dtype)
  if impl == "linear":
    _check_linear(norm, mask, bias, is_causal, cap)
    out = _linear(query, key, value, norm, p, mask, scale)
  elif impl == "pallas":
    from softattn import pallas  # noqa: PLC0415
    reason = _pallas_reason(norm, mask, bias, p)
    if reason:
      raise ValueError(reason)
    out = pallas.pallas_attention(query, key, value, norm, p, mask, scale,
                                  is_causal, chunk_size, query_chunk_size,
                                  logits_soft_cap=cap)
  elif impl == "chunked":
    if not norm.streamable:
      raise ValueError(
          f"normalizer {norm.name!r} cannot be chunked over keys: its weights "
          f"depend on the whole score row and it declares no stream "
          f"(softattn.streams); use implementation='dense'")
    from softattn.chunked import chunked_attention  # noqa: PLC0415
    out = chunked_attention(query, key, value, norm, p, mask, bias, scale,
                            is_causal, chunk_size or DEFAULT_CHUNK,
                            query_chunk_size or chunk_size or DEFAULT_CHUNK,
                            logits_soft_cap=cap)
  else:
    out, w = _dense(query, key, value, norm, p, mask, bias, scale, is_causal,
                    cap)
    if return_weights:
      return out, w
  return out


def _key_only(mask):
  return mask is None or mask.shape[2] == 1


def _auto(norm, shape, d, mask, bias, is_causal, return_weights, p=None,
          dv=None, blocks=(None, None), logits_soft_cap=None, dtype=None):
  """The path ``"auto"`` picks; ``blocks``: the caller's ``(chunk_size,
  query_chunk_size)``, which the fused kernels would take as their blocks."""
  b, h, lq, lk = shape
  if return_weights:
    return "dense"
  if (norm.is_linear and bias is None and not is_causal and _key_only(mask)
      and logits_soft_cap is None and lq * lk > (lq + lk) * d):
    return "linear"
  if ((lq * lk > AUTO_PALLAS_MIN_SCORES and _fused_on_tpu(norm, mask, bias, p))
      or (lq * lk > AUTO_PALLAS_MIN_SCORES_GPU and _fused_on_gpu(
          norm, mask, bias, p, d, dv, blocks, dtype, logits_soft_cap))):
    return "pallas"
  if norm.streamable and lq * lk > AUTO_CHUNK_MIN_SCORES:
    return "chunked"
  return "dense"


def _pallas_reason(norm, mask, bias, p=None):
  """Why the fused kernels cannot run this call, or None: what ``auto``
  (``_fused_on_tpu``/``_fused_on_gpu``) and ``implementation='pallas'``
  both ask (a ``logits_soft_cap`` is no reason: every kernel takes it)."""
  from softattn import pallas  # noqa: PLC0415
  return pallas.unsupported_reason(norm, mask, bias, p)


def _fused_on_tpu(norm, mask, bias, p=None):
  # The streams (sparsemax, entmax15: several passes; stick_breaking: its
  # scans double the MXU work) fuse too, but their crossover against dense
  # was never measured: auto leaves them to dense/chunked.
  from softattn import pallas  # noqa: PLC0415
  return (pallas.target_chip()[1] and norm.stream is None
          and _pallas_reason(norm, mask, bias, p) is None)


def _fused_on_gpu(norm, mask, bias, p=None, d=64, dv=None,
                  blocks=(None, None), dtype=None, logits_soft_cap=None):
  """On GPU: the TPU kernels' contract plus that of the backend the call
  would run on (``pallas.gpu.backend``: Mosaic GPU's head dims and blocks,
  or the Triton lowering's power-of-two head dims, blocks >= 16 and no
  ``erf``)."""
  from softattn import pallas  # noqa: PLC0415
  if pallas.target_platform() != "gpu" or _pallas_reason(
      norm, mask, bias, p) is not None:
    return False
  from softattn.pallas.gpu import backend  # noqa: PLC0415
  return backend.unsupported_reason(norm, p, d, dv, blocks, dtype,
                                    logits_soft_cap) is None


def _check_linear(norm, mask, bias, is_causal, logits_soft_cap=None):
  if not norm.is_linear:
    raise ValueError(
        f"normalizer {norm.name!r} is not linear in the scores; "
        f"implementation='linear' needs 'scaled' or "
        f"\"relu_seqlen(act='identity')\"")
  if logits_soft_cap is not None:
    raise ValueError(
        "implementation='linear' cannot take logits_soft_cap: c*tanh(s/c) "
        "makes the weights nonlinear in the scores; use 'dense' or 'chunked' "
        "(or 'auto')")
  if bias is not None or is_causal or not _key_only(mask):
    raise ValueError(
        "implementation='linear' needs a key-only mask ([batch, heads|1, 1, "
        "k_len]) and no bias or causal mask; use 'chunked' or 'dense'")


def _linear(query, key, value, norm, p, mask, scale):
  """``coef(n) * scale * Q (K^T V)`` with masked keys zeroed."""
  b, lq, h, d = query.shape
  lk = key.shape[1]
  f32 = _compute_dtype(query)
  if mask is None:
    n = jnp.full((b, h, 1, 1), lk, f32)
    kv_key = key
  else:
    km = jnp.broadcast_to(mask, (mask.shape[0], mask.shape[1], 1, lk))[:, :, 0]
    n = jnp.sum(km, axis=-1).astype(f32)[..., None, None]  # [B|1, H|1, 1, 1]
    kv_key = jnp.where(jnp.transpose(km, (0, 2, 1))[..., None], key, 0)
  # In the compute dtype throughout: this path costs O(L d^2), and XLA:CPU
  # has no bf16 x bf16 -> f32 dot thunk for some multi-head shapes.
  kv = jnp.einsum("bkhd,bkhe->bhde", kv_key.astype(f32), value.astype(f32))
  out = jnp.einsum("bqhd,bhde->bqhe", query.astype(f32), kv)
  coef = norm.linear_coef(jnp.maximum(n, 1.0), **p) * scale  # [B, H, 1, 1]
  coef = jnp.where(n > 0, coef, 0.0)
  out = out * jnp.transpose(coef, (0, 2, 1, 3))
  return out.astype(value.dtype)
