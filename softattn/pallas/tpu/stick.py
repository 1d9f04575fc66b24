"""Stick-breaking attention fused on TPU: a reverse-order forward kernel, a
dQ kernel and the generic dK/dV kernel, with per-block carries.

Stick-breaking (Tan et al. 2024, arXiv 2410.17980; ``softattn.normalizers
.simplex``): over the valid keys of a row, ``beta = sigmoid(t)`` and

    w_j = beta_j prod_{k > j} (1 - beta_k)
        = exp(log beta_j + sum_{k > j} a_k),   a = log(1 - beta) = -softplus(t),

(``log beta = -softplus(-t)``; masked keys have ``a = 0`` and ``w = 0``:
they neither take nor break the stick). ``t`` is the normalizer's transform
of the scores (the identity, or ``prenorm``'s standardisation).

Forward (``_forward_kernel``): per query block the key blocks run from the
last to the first (the index maps reverse the key axis), carrying per row
``later = sum a`` over the blocks already seen; in a block the sum over
``k > j`` is ``later`` plus an exclusive in-block suffix sum (``scan``).
Each block's ``later`` (before it) is kept, ``[B, H, Lq, nk]`` f32: the one
residual besides q, k, v. Carries are laid out with the key blocks on the
lanes (one ``[bq, nk]`` block per query block, column ``kj`` selected by a
lane iota): TPU tiles pad a minor dimension to 128 lanes, so a
``[..., Lq, 1]`` array per key block would take ``128 x nk`` lanes per row
in HBM instead of ``max(nk, 128)`` (compiled for v4, B=8, H=12, L=4096,
D=256, causal, forward+backward: 1.8 GB of temporaries that way, 253 MB
this way, softmax's kernels 202 MB).

Backward, with ``dp_ij = dO_i . v_j`` and ``T = w * dp``:

    dL/dt_j = T_j (1 - beta_j) - beta_j sum_{m < j} T_m

(``t_j`` enters ``w_j`` through ``log beta_j``, whose derivative is
``1 - beta_j``, and every ``w_m``, ``m < j``, through ``a_j``, derivative
``-beta_j``). The prefix sum runs in the keys' *forward* order, so the dQ
kernel walks key blocks first to last carrying ``before = sum T`` of the
earlier blocks (and reads ``later`` from the forward) and writes ``before``
per block; the dK/dV kernel (one key block, queries streamed) then reads
both carries and needs no scan. Why not the suffix form
``sum_{m<j} T_m = dO.O - sum_{m>=j} T_m`` (reverse order, flash
attention's ``D``): far from the query ``sum_{m<j} T_m`` is tiny while
``dO.O`` is not, and the difference of two rounded numbers (O saved in
bf16) gave every such key a spurious ``-beta_j (error of D)``; a running
prefix has no cancellation.

Cumulative sums on the MXU (Mosaic has no cumsum): within chunks of 128
lanes (or the whole block when it is not a multiple of 128) a matmul with a
strictly triangular 0/1 matrix, the operand split into bf16 pieces by
truncation (three for f32 inputs: all 24 bits, exact products, f32 sums;
two for bf16 inputs, ~16 bits, below bf16's rounding of ``w``), chunk
totals carried in order. A full
``[bk, bk]`` triangle would cost ``bk`` MACs per score (8x QK^T's at
``bk = 512, D = 64``); 128-lane chunks cost 128 per pass.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from softattn.pallas.common import operands, tile
from softattn.pallas.tpu import backward, blocks, forward
from softattn.streams import STICK_BREAKING

CHUNK = 128  # lanes per triangular matmul (one MXU tile width)


def applies(norm) -> bool:
  """Whether ``norm`` streams as stick-breaking (``prenorm`` of it too)."""
  return norm.stream is STICK_BREAKING


# -- tile math ----------------------------------------------------------------
def _softplus(x):
  # max(x, 0) + log1p(exp(-|x|)): stable for any x, plain exp and log1p
  # (Mosaic lowers both). Never differentiated: the backward is by hand.
  return jnp.maximum(x, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


def _passes(dtype) -> int:
  return 3 if jnp.dtype(dtype) == jnp.float32 else 2


def _chunk(n: int) -> int:
  return CHUNK if n % CHUNK == 0 else n


def _truncate_bf16(x):
  """``x`` (f32) with the low 16 bits of its pattern cleared: its leading 8
  significant bits, exactly a bf16 value. By bits, not by a round trip
  through bf16: XLA (``xla_allow_excess_precision``, on by default) may
  drop an f32 -> bf16 -> f32 round trip, which made the remainder 0 and
  left one bf16 piece in the interpreter (measured: dV off by 2e-3)."""
  bits = jax.lax.bitcast_convert_type(x, jnp.int32) & jnp.int32(-65536)
  return jax.lax.bitcast_convert_type(bits, jnp.float32)


def scan(x, reverse: bool, passes: int):
  """``(excl, total)``: the exclusive cumulative sum of a ``[rows, n]`` f32
  tile along its last axis (from the right if ``reverse``: ``excl_j =
  sum_{k > j} x_k``; else ``sum_{k < j}``) and the row totals ``[rows, 1]``,
  by triangular 0/1 matmuls (module docstring)."""
  n = x.shape[-1]
  c = _chunk(n)
  r = jax.lax.broadcasted_iota(jnp.int32, (c, c), 0)
  col = jax.lax.broadcasted_iota(jnp.int32, (c, c), 1)
  tri = ((r > col) if reverse else (r < col)).astype(jnp.bfloat16)

  def dot(piece):
    out, rest = 0.0, piece
    for _ in range(passes):
      part = _truncate_bf16(rest)
      rest = rest - part
      out = out + jax.lax.dot(part.astype(jnp.bfloat16), tri,
                              preferred_element_type=jnp.float32)
    return out

  parts = [None] * (n // c)
  carry = jnp.zeros((x.shape[0], 1), jnp.float32)
  for i in (reversed(range(n // c)) if reverse else range(n // c)):
    piece = x[:, i * c:(i + 1) * c]
    parts[i] = dot(piece) + carry
    carry = carry + jnp.sum(piece, axis=-1, keepdims=True)
  excl = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)
  return excl, carry


def weights(t, valid, later, passes):
  """``(w, log_beta, a, sum a)`` of one tile; ``later`` ``[bq, 1]``: the sum
  of ``a`` over the valid keys of the later blocks."""
  sp = _softplus(-t)
  log_beta = -sp
  a = jnp.where(valid, -sp - t, 0.0)            # log(1 - beta)
  after, total = scan(a, reverse=True, passes=passes)
  w = jnp.where(valid, jnp.exp(log_beta + after + later), 0.0)
  return w, log_beta, a, total


def grads(t, valid, dp, later, before, passes):
  """``(w, dt, sum T)`` of one tile (module docstring); ``before``
  ``[bq, 1]``: ``sum T`` over the earlier blocks."""
  w, log_beta, a, _ = weights(t, valid, later, passes)
  tw = w * dp
  prior, total = scan(tw, reverse=False, passes=passes)
  dt = tw * jnp.exp(a) - jnp.exp(log_beta) * (prior + before)
  return w, jnp.where(valid, dt, 0.0), total


# -- specs and costs ----------------------------------------------------------
def _n_key_blocks(cfg):
  return pl.cdiv(cfg.lk, cfg.bk)


def _column(block, j):
  """Column ``j`` (traced) of a ``[bq, n]`` block, as ``[bq, 1]``."""
  lane = jax.lax.broadcasted_iota(jnp.int32, block.shape, 1)
  return jnp.sum(jnp.where(lane == j, block, 0.0), axis=-1, keepdims=True)


def _set_column(ref, h, j, col):
  """``ref[h][:, j] = col`` (``j`` traced) on a ``[hp, bq, n]`` block."""
  lane = jax.lax.broadcasted_iota(jnp.int32, ref.shape[1:], 1)
  ref[h] = jnp.where(lane == j, col, ref[h])


def _reversed(spec, nk):
  """``spec`` over a grid whose key axis (the last) runs backwards."""
  index = spec.index_map
  return pl.BlockSpec(spec.block_shape,
                      lambda b, g, i, j: index(b, g, i, nk - 1 - j))


def _cost(cfg, kernel, b, h, itemsize):
  """``blocks.cost_estimate`` plus the scans' matmuls (``passes`` x 128
  MACs per score each: one forward, two backward) and their
  transcendentals (softplus and w; backward also beta, 1 - beta)."""
  base = blocks.cost_estimate(kernel, b, h, cfg.lq, cfg.lk, cfg.d, cfg.dv,
                              itemsize, cfg.causal)
  pairs = b * h * cfg.lq * cfg.lk // (2 if cfg.causal else 1)
  scans = 1 if kernel == "forward" else 2
  passes = 3 if itemsize == 4 else 2
  flops = 2 * pairs * _chunk(cfg.bk) * passes * scans
  carries = b * h * _n_key_blocks(cfg) * cfg.lq * 4 * scans
  return pl.CostEstimate(
      flops=base.flops + int(flops),
      transcendentals=int(pairs * (3 if kernel == "forward" else 5)),
      bytes_accessed=base.bytes_accessed + int(carries))


# -- kernels ------------------------------------------------------------------
def _forward_kernel(cfg, passes, q_ref, k_ref, v_ref, rows_ref, *refs):
  mask_ref = refs[0] if cfg.has_mask else None
  o_ref, later_ref, later_sc, acc_sc = refs[-4:]
  qi, step = pl.program_id(2), pl.program_id(3)
  kj = pl.num_programs(3) - 1 - step   # last key block first

  @pl.when(step == 0)
  def _():
    later_sc[...] = jnp.zeros_like(later_sc)
    acc_sc[...] = jnp.zeros_like(acc_sc)

  for h in range(cfg.hp):   # every block, skipped ones too
    _set_column(later_ref, h, kj, later_sc[h])

  @pl.when(tile.needed(cfg, qi, kj))
  def _():
    for h in range(cfg.hp):
      q, k, v = forward._qkv(cfg, q_ref, k_ref, v_ref, h, qi, kj)
      s, valid = tile.scores(cfg, qi, kj, q, k, tile.mask_row(cfg, mask_ref, h))
      t = tile.transform(cfg, s, tile.row_values(cfg, rows_ref[h]))
      w, _, _, total = weights(t, valid, later_sc[h], passes)
      acc_sc[h] += jax.lax.dot(w.astype(v.dtype), v,
                               preferred_element_type=jnp.float32)
      later_sc[h] += total

  @pl.when(step == pl.num_programs(3) - 1)
  def _():
    for h in range(cfg.hp):
      o_ref[:, pl.ds(h * cfg.dv, cfg.dv)] = acc_sc[h].astype(o_ref.dtype)


def attention(cfg: tile.Config, q, k, v, rows, mask):
  """``(out [B, Lq, H*Dv], later [B, H, Lq, nk])``."""
  b, h = q.shape[0], q.shape[2] // cfg.d
  nk = _n_key_blocks(cfg)
  specs = forward._specs(cfg, rows.shape[-1], mask)
  specs = [specs[0], _reversed(specs[1], nk), _reversed(specs[2], nk),
           specs[3]] + [_reversed(s, nk) for s in specs[4:]]
  args = (q, k, v, rows) + (() if mask is None else (mask,))
  passes = _passes(q.dtype)

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_forward_kernel, cfg, passes),
        grid=forward.grid(cfg, b, h),
        in_specs=specs,
        out_specs=[tile.seq_spec(cfg, cfg.bq, cfg.dv, axis=2),
                   tile.row_spec(cfg, nk, q_axis=2)],
        out_shape=[jax.ShapeDtypeStruct((b, cfg.lq, h * cfg.dv), v.dtype),
                   jax.ShapeDtypeStruct((b, h, cfg.lq, nk), jnp.float32)],
        scratch_shapes=[pltpu.VMEM((cfg.hp, cfg.bq, 1), jnp.float32),
                        pltpu.VMEM((cfg.hp, cfg.bq, cfg.dv), jnp.float32)],
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=_cost(cfg, "forward", b, h, q.dtype.itemsize),
        interpret=interpret, name="softattn_stick_forward")
  return forward.run(cfg, build, *args)


def _dq_kernel(cfg, passes, with_dq, has_drows, *refs):
  ins, outs = operands.unpack(cfg, has_drows, refs)
  later_ref = ins[5]   # the residual-rows slot holds the forward's carry
  if with_dq:
    dq_ref, dr_ref, before_ref, dq_sc, dr_sc, before_sc = outs
  else:
    (dr_ref, before_ref, dr_sc, before_sc), dq_ref, dq_sc = outs, None, None
  qi, kj = pl.program_id(2), pl.program_id(3)

  @pl.when(kj == 0)
  def _():
    dr_sc[...] = jnp.zeros_like(dr_sc)
    before_sc[...] = jnp.zeros_like(before_sc)
    if with_dq:
      dq_sc[...] = jnp.zeros_like(dq_sc)

  for h in range(cfg.hp):   # every block, skipped ones too
    _set_column(before_ref, h, kj, before_sc[h])

  @pl.when(tile.needed(cfg, qi, kj))
  def _():
    for h in range(cfg.hp):
      wg = functools.partial(_tile_rule, passes, _column(later_ref[h], kj),
                             before_sc[h])
      _, ds, dcols, (_, k, _), total = backward._tile_grads(
          cfg, qi, kj, ins, h, wg)
      for i, dc in enumerate(dcols):
        dr_sc[h, :, i:i + 1] += dc
      before_sc[h] += total
      backward.add_dq(cfg, dq_sc, h, ds, k)

  backward.store_dq(cfg, kj, dr_ref, dr_sc, dq_ref, dq_sc)


def _tile_rule(passes, later, before, t, valid, dp):
  return grads(t, valid, dp, later, before, passes)


def _carries_rule(passes, nk, carries, kj):
  """``backward._tile_grads``'s rule on key block ``kj`` from a
  ``[bq, 2 nk]`` block of (later, before) carries (the dK/dV kernel)."""
  return functools.partial(_tile_rule, passes, _column(carries, kj),
                           _column(carries, nk + kj))


def dq_and_rows(cfg, q, k, v, do, rows, later, drows, mask, with_dq=True):
  """``(dq or None, drows [B, H, Lq, nd], before [B, H, Lq, nk])``."""
  b, h = q.shape[0], q.shape[2] // cfg.d
  nk, nd = _n_key_blocks(cfg), operands.n_diff(cfg)
  specs = backward._in_specs(cfg, rows, later, drows, mask, q_axis=2)
  out_specs = [tile.row_spec(cfg, nd, q_axis=2),
               tile.row_spec(cfg, nk, q_axis=2)]
  out_shape = [jax.ShapeDtypeStruct((b, h, cfg.lq, nd), jnp.float32),
               jax.ShapeDtypeStruct((b, h, cfg.lq, nk), jnp.float32)]
  scratch = [pltpu.VMEM((cfg.hp, cfg.bq, nd), jnp.float32),
             pltpu.VMEM((cfg.hp, cfg.bq, 1), jnp.float32)]
  if with_dq:
    out_specs.insert(0, tile.seq_spec(cfg, cfg.bq, cfg.d, axis=2))
    out_shape.insert(0, jax.ShapeDtypeStruct(q.shape, q.dtype))
    scratch.insert(0, pltpu.VMEM((cfg.hp, cfg.bq, cfg.d), jnp.float32))
  args = backward._args(q, k, v, do, rows, later, drows, mask)

  def build(interpret):
    return pl.pallas_call(
        functools.partial(_dq_kernel, cfg, _passes(q.dtype), with_dq,
                          drows is not None),
        grid=backward._grid(cfg, b, h, q_axis=2),
        in_specs=specs, out_specs=out_specs, out_shape=out_shape,
        scratch_shapes=scratch,
        compiler_params=blocks.compiler_params(cfg.chip),
        cost_estimate=_cost(cfg, "dq" if with_dq else "drows", b, h,
                            q.dtype.itemsize),
        interpret=interpret,
        name="softattn_stick_dq" if with_dq else "softattn_stick_drows")
  out = forward.run(cfg, build, *args)
  return tuple(out) if with_dq else (None, *out)


# -- custom VJP ---------------------------------------------------------------
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def core(cfg, q, k, v, nrow, prow, kmask):
  """``wrapper._core``'s contract for stick-breaking normalizers."""
  return _core_fwd(cfg, q, k, v, nrow, prow, kmask)[0]


def _core_fwd(cfg, q, k, v, nrow, prow, kmask):
  rows = forward.rows(cfg, q, k, nrow, prow, kmask)
  out, later = attention(cfg, q, k, v, rows, kmask)
  return out, (q, k, v, nrow, prow, kmask, rows, later)


def _core_bwd(cfg, saved, do):
  q, k, v, nrow, prow, kmask, rows, later = saved
  b, h = q.shape[0], q.shape[2] // cfg.d
  do = do.astype(v.dtype)  # the backward matmuls run in the inputs' dtype
  args = (q, k, v, do, rows, later)
  drows = None
  if cfg.moments:  # the row sums dmean, dvar first (backward.py)
    _, drows, _ = dq_and_rows(cfg, *args, None, kmask, with_dq=False)
  dq, dcols, before = dq_and_rows(cfg, *args, drows, kmask)
  carries = jnp.concatenate([later, before], axis=-1)
  dk, dv = backward.dk_dv(
      cfg, q, k, v, do, rows, carries, drows, kmask,
      grad_of=functools.partial(_carries_rule, _passes(q.dtype),
                                _n_key_blocks(cfg)),
      cost=_cost(cfg, "dkv", b, h, q.dtype.itemsize))
  n_stats = 2 if cfg.moments else 0
  dprow = None if prow is None else dcols[..., n_stats:n_stats + prow.shape[-1]]
  return dq, dk, dv, jnp.zeros_like(nrow), dprow, None


core.defvjp(_core_fwd, _core_bwd)
