"""``pallas_attention``: layout, statistics, custom VJP, shard_map.

Called by ``dot_product_attention(..., implementation="pallas")`` with its
checked arguments. Steps:

1. ``[B, L, H, D]`` is read as ``[B, L, H*D]``: a reshape, no transpose, no
   padding (the kernels take ``hp`` heads per block and mask ragged tails by
   position: ``common/tile.py``).
2. The per-row count ``n`` (valid keys per query, from the key mask and the
   causal prefix; no gradient) and any parameter given as an array
   (per head or per batch: it must not vary over keys) become row columns,
   ``[B, H, Lq, R]`` f32.
3. ``_core`` (a ``custom_vjp``): the moments kernel when the normalizer
   ``needs`` them, the forward kernel; backward: dQ (twice for moments, see
   ``tpu/backward.py``) and dK/dV kernels. It saves q, k, v as the kernels read
   them (the caller's arrays, no copies, or their bfloat16 rounding:
   ``operand_dtype``), the output in the inputs' dtype (float32 for the ratio mode in
   low precision: ``_core_bwd`` says why) and the small row arrays.
   Parameter cotangents flow back through the broadcast of step 2, so
   learnable parameters train. Stick-breaking runs ``stick.core`` instead (same contract, its own
   kernels and carries, in the caller's dtype). The threshold streams run
   as passes of the threshold kernel and of ``_core``
   (``common/streams.py``); their weighted pass gives ``_core`` tables of
   the tiles to skip (``tpu/skip.py``).
4. Under ``jit`` with a mesh set (``jax.set_mesh``/``jax.sharding.use_mesh``)
   the whole thing runs per shard in ``shard_map``: batch over the ``data``
   axis and heads over ``model`` when they divide (softattn's mesh axes);
   Mosaic kernels are not partitioned automatically.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from softattn.modes import MODES
from softattn.pallas.common import prepare, streams, tile
from softattn.pallas.tpu import (backward, blocks, forward, skip, stick,
                                 threshold)

FUSED_MODES = tuple(MODES)  # every mode of the table tiles (as of import)
ALTERNATIVES = "implementation='dense' (or 'auto')"
# A scalar-prefetch table lives whole in SMEM, 1 MiB on v4 and v5e (an AOT
# compile of a 1 MiB one ran out of it): the threshold streams' skip table
# (int32 per batch element, head block and tile of a shard) takes at most a
# quarter, or the weighted pass computes every tile.
SKIP_TABLE_BYTES = 256 * 2**10


def unsupported_reason(norm, mask=None, bias=None,
                       params=None) -> str | None:
  """Why the fused kernel cannot run this call, or None when it can.

  ``params``: the resolved normalizer parameters, when known. The mode's
  scalar (``Normalizer.eps``: an epsilon, or softmax_sink's sink logit) is
  compiled into the kernels as a number; an array there is taken only by a
  mode with a ``scalar_grad`` (``exp_sink``: a learnable sink, read per row,
  its cotangent from the saved row statistics), refused elsewhere.
  """
  if (norm.mode not in MODES and getattr(norm.stream, "alpha", None) is None
      and not stick.applies(norm)):
    return (f"normalizer {norm.name!r} has no fused Pallas kernel: its weights "
            f"need the whole sorted or ordered score row (mode "
            f"{norm.mode!r}, streamed in several passes by "
            f"implementation='chunked'); use 'chunked' or {ALTERNATIVES}")
  scalar = (params or {}).get(norm.eps_param) if norm.eps_param else None
  if isinstance(scalar, (jax.Array, np.ndarray)) and getattr(
      MODES.get(norm.mode), "scalar_grad", None) is None:
    return (f"normalizer {norm.name!r}: the fused kernels take "
            f"{norm.eps_param!r} as a number, not an array (a learnable "
            f"{norm.eps_param} needs its gradient); use "
            f"implementation='chunked' or 'dense'")
  if bias is not None:
    return ("implementation='pallas' takes no additive bias; use "
            "implementation='chunked' or 'dense'")
  if mask is not None and mask.shape[2] != 1:
    return ("implementation='pallas' takes a key mask ([batch, heads|1, 1, "
            "k_len]) and is_causal, not a per-query mask; use "
            "implementation='chunked' or 'dense'")
  return None


def target_chip() -> tuple[str, bool]:
  """``(generation, is_tpu)`` of the devices this computation is built for:
  the context mesh's devices if a mesh is set (AOT for a TPU topology from a
  CPU host sets one), else the default backend's first device."""
  device = _target_device()
  return blocks.chip_of_kind(device.device_kind), device.platform == "tpu"


def _target_device():
  mesh = prepare.context_mesh()
  device = getattr(mesh, "abstract_device", None) if mesh else None
  return jax.devices()[0] if device is None else device


def target_platform() -> str:
  """``"tpu"``, ``"gpu"`` or ``"cpu"``: the platform this computation is
  built for (the context mesh's devices, else the default backend's)."""
  return _target_device().platform


# jax_default_matmul_precision settings under which XLA:TPU runs a float32
# matmul as one bfloat16 pass (None: not set).
_ONE_PASS = (None, "default", "bfloat16", "fastest", "DEFAULT", "BF16_BF16_F32")


def operand_dtype(dtype, platform: str | None):
  """The dtype the kernels read q, k, v in, for inputs of ``dtype``.

  On a TPU a float32 matmul at the default precision rounds its operands to
  bfloat16 and accumulates in float32 (one MXU pass); XLA's dense path does
  so and stores the rounded q, k, v. The fused path then runs in bfloat16:
  the kernels read the rounded q, k, v (half the bytes, saved as such for
  the backward), accumulate in float32 and write the output and dQ/dK/dV in
  bfloat16, widened back to float32 for the caller. Against XLA's f32 dot
  outputs that is one more bfloat16 rounding of each, which a layer's next
  matmul (the output projection, the weight gradients) makes at this
  precision anyway. ViT-B/16 at 16 images per v5e chip: 2.4 GB less HBM
  traffic a step (``benchmarks/pod_step.py``). Under
  ``jax.default_matmul_precision("float32")`` (or ``"highest"``) the kernels
  run in float32. Elsewhere (``platform=None``: no rounding), and for other
  dtypes: ``dtype`` itself.
  """
  if (platform == "tpu" and jnp.dtype(dtype) == jnp.float32 and
      jax.config.jax_default_matmul_precision in _ONE_PASS):
    return jnp.dtype(jnp.bfloat16)
  return jnp.dtype(dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(cfg, q, k, v, nrow, prow, kmask, tables):
  return _core_fwd(cfg, q, k, v, nrow, prow, kmask, tables)[0]


def _core_fwd(cfg, q, k, v, nrow, prow, kmask, tables):
  """``tables``: None, or the skip tables (``tpu/skip.py``) by query and
  by key block (the threshold streams' weighted pass)."""
  rows = forward.rows(cfg, q, k, nrow, prow, kmask)
  by_query = None if tables is None else tables[0]
  out, res = forward.attention(cfg, q, k, v, rows, kmask, by_query)
  return out, (q, k, v, nrow, prow, kmask, rows, out, res, tables)


def _core_bwd(cfg, saved, do):
  q, k, v, nrow, prow, kmask, rows, out, res, tables = saved
  by_query, by_key = (None, None) if tables is None else tables
  # ``di = do . o`` per (row, head), in f32. For the ratio modes in low
  # precision ``out`` is the kernel's unrounded f32 output: there
  # ``dt = (dp - di) / Z`` and a small ``Z`` turns a bf16-rounded ``o`` into
  # large gradient errors (bf16 dQ/dK of siren_max and cos_max were 10-20x
  # dense bf16's error with a bf16 output, even with ``softattn.modes.pv``;
  # measured). The other modes save the output in the inputs' dtype, as
  # FlashAttention does.
  # The per-head sum is a matmul with the 0/1 head-membership matrix: a
  # reshape to heads and a sum over Dv made XLA:TPU copy the product into
  # another layout first (ViT-B/16, 16 images per v5e chip: ~0.5 GB a
  # step). HIGHEST: the products are summed unrounded.
  h = out.shape[2] // cfg.dv
  heads = jnp.repeat(jnp.eye(h, dtype=jnp.float32), cfg.dv, axis=0)
  di = jnp.dot(do.astype(jnp.float32) * out.astype(jnp.float32), heads,
               precision=jax.lax.Precision.HIGHEST)
  di = jnp.transpose(di, (0, 2, 1))[..., None]
  do = do.astype(v.dtype)  # the backward matmuls run in the inputs' dtype
  brows = jnp.concatenate([res, di], axis=-1)
  args = (q, k, v, do, rows, brows)
  drows = None
  if cfg.moments:
    _, drows = backward.dq_and_rows(cfg, *args, None, kmask, with_dq=False,
                                    table=by_query)
    # A dead tile's scores still move the row's mean and variance, so with
    # drows its dS is not 0 (tpu/backward.py): no skipping there.
    by_query = by_key = None
  dq, dcols = backward.dq_and_rows(cfg, *args, drows, kmask, table=by_query)
  dk, dv = backward.dk_dv(cfg, *args, drows, kmask, table=by_key)
  n_stats = 2 if cfg.moments else 0  # diff_names = (mean, var)? + params
  dprow = None if prow is None else dcols[..., n_stats:n_stats + prow.shape[-1]]
  dprow = prepare.add_scalar_grad(cfg, prow, dprow, res[..., 0:1], res[..., 1:2], di)
  return dq, dk, dv, jnp.zeros_like(nrow), dprow, None, None


_core.defvjp(_core_fwd, _core_bwd)


def _per_shard(cfg, platform, query, key, value, prow, kmask, live=None):
  """``platform``: each input in ``operand_dtype`` for it; ``live``: the
  tiles the weighted pass of a threshold stream computes (per head,
  ``streams.live_tiles``), or None."""
  b, lq, h, _ = query.shape
  dtype = value.dtype
  query, key, value = (x.astype(operand_dtype(x.dtype, platform))
                       for x in (query, key, value))
  lk = key.shape[1]
  flat = lambda x: x.reshape(x.shape[0], x.shape[1], -1)  # noqa: E731
  nrow = jnp.broadcast_to(prepare.counts(kmask, b, h, lq, lk, cfg.causal),
                          (b, h, lq, 1))
  if stick.applies(cfg.norm):
    out = stick.core(cfg, flat(query), flat(key), flat(value), nrow, prow,
                     kmask)
  else:
    tables = None if live is None else skip.tables(live, cfg.hp)
    out = _core(cfg, flat(query), flat(key), flat(value), nrow, prow, kmask,
                tables)
  return out.reshape(b, lq, h, cfg.dv).astype(dtype)


def _local(b, h):
  """``(batch, heads)`` each shard holds under the context mesh."""
  mesh = prepare.context_mesh()
  if mesh is None:
    return b, h
  bax, hax = prepare.axis(mesh, "data", b), prepare.axis(mesh, "model", h)
  return (b // mesh.shape[bax] if bax else b,
          h // mesh.shape[hax] if hax else h)


def _blocks(query, lk, dv, operands, chip, chunk_size, query_chunk_size):
  """``(hp, bq, bk)``: heads per block (of a shard's heads under the
  context mesh) and block sizes by ``blocks.block_sizes``'s rule, under
  the caller's overrides."""
  b, lq, h, d = query.shape
  hp = tile.heads_per_block(_local(b, h)[1], d, dv)
  bq, bk = blocks.block_sizes(lq, lk, d, dv, operands, chip, hp=hp)
  bk = min(chunk_size or bk, lk)
  bq = min(query_chunk_size or chunk_size or bq, lq)
  return hp, bq, bk


def _skip_tiles(query, key, value, chunk_size, query_chunk_size):
  """The threshold streams' weighted pass's ``(bq, bk)`` (its operands
  unrounded, as ``attend``'s), at which the stats pass records block maxima
  for skipping; None (no skipping) when its table would pass
  ``SKIP_TABLE_BYTES``."""
  b, lq, h, _ = query.shape
  lk = key.shape[1]
  hp, bq, bk = _blocks(query, lk, value.shape[-1], query.dtype,
                       target_chip()[0], chunk_size, query_chunk_size)
  b_local, h_local = _local(b, h)
  size = 4 * b_local * (h_local // hp) * -(-lq // bq) * -(-lk // bk)
  return (bq, bk) if size <= SKIP_TABLE_BYTES else None


def pallas_attention(query, key, value, norm, p, mask, scale, causal,
                     chunk_size=None, query_chunk_size=None, interpret=None,
                     round_operands=True, logits_soft_cap=None, sums=None,
                     live=None):
  """Fused attention; arguments as ``dot_product_attention`` after its checks
  (``mask``: 4-D key mask or None; ``p``: resolved parameters).

  ``chunk_size``/``query_chunk_size`` override the key/query block sizes of
  ``blocks.block_sizes``. ``interpret``: None picks Mosaic when lowering for
  TPU and the Pallas interpreter elsewhere. ``round_operands=False``: the
  kernels read the inputs' own dtypes even where ``operand_dtype`` would
  round float32 (the threshold streams' row sums need float32).
  ``logits_soft_cap``: a checked float (``modes.check_soft_cap``) or None;
  the kernels cap each tile's scores (``tile.scores``). ``sums``: a
  ``threshold.Sums``, one pass of the threshold search instead of attention
  (``value``: its per-row candidates; ``tpu/threshold.py``). ``live``: the
  tiles to compute, ``[B, H, nq, nk]`` bool at this call's blocks (the
  threshold streams' weighted pass, ``streams.live_tiles``; the others are
  skipped, ``tpu/skip.py``), or None: all.
  """
  if target_platform() == "gpu":  # Mosaic GPU or Triton (gpu/backend.py)
    from softattn.pallas.gpu import backend as gpu  # noqa: PLC0415
    return gpu.gpu_attention(query, key, value, norm, p, mask, scale, causal,
                             chunk_size, query_chunk_size, interpret,
                             logits_soft_cap=logits_soft_cap)
  if sums is None and norm.mode not in MODES and not stick.applies(norm):
    # a threshold stream: passes of its own kernel and the pointwise one
    attend = lambda q, k, v, nz, pp, sums=None, live=None: (  # noqa: E731
        pallas_attention(q, k, v, nz, pp, mask, scale, causal, chunk_size,
                         query_chunk_size, interpret, round_operands=False,
                         logits_soft_cap=logits_soft_cap, sums=sums,
                         live=live))
    return streams.threshold_attention(
        attend, query, key, value, norm, p,
        tiles=_skip_tiles(query, key, value, chunk_size, query_chunk_size))
  b, lq, h, d = query.shape
  lk, dv = key.shape[1], value.shape[-1]
  chip, _ = target_chip()
  # Stick-breaking's kernels keep the caller's dtype (not measured in bf16
  # against f32 on a step).
  platform = target_platform() if round_operands and not stick.applies(
      norm) else None
  operands = operand_dtype(query.dtype, platform)
  mesh = prepare.context_mesh()
  hp, bq, bk = _blocks(query, lk, dv, operands, chip, chunk_size,
                       query_chunk_size)
  if live is not None and live.shape[2:] != (-(-lq // bq), -(-lk // bk)):
    raise ValueError(f"live tiles {live.shape[2:]} for blocks ({bq}, {bk}) "
                     f"of lengths ({lq}, {lk})")
  static, names, prow, kmask = prepare.operands(norm, p, mask, (b, h, lq, lk))
  cfg = tile.Config(norm=norm, static_params=static, param_names=names,
                    scale=float(scale), causal=bool(causal), lq=lq, lk=lk,
                    bq=bq, bk=bk, has_mask=kmask is not None, chip=chip,
                    interpret=interpret, hp=hp, d=d, dv=dv,
                    mask_heads=kmask is not None and kmask.shape[1] > 1,
                    logits_soft_cap=logits_soft_cap)
  fn = functools.partial(_per_shard, cfg, platform) if sums is None else (
      functools.partial(threshold.per_shard, cfg, sums))
  args = (query, key, value, prow, kmask) + (() if live is None else (live,))
  if mesh is None:
    return fn(*args)
  return prepare.sharded(fn, mesh, *args)
