"""Mosaic GPU forward kernels: row moments, then the fused attention pass.

One program (one warpgroup) per (batch, head, query block), grid
``(B, H, Lq / bq)``. The query block and its per-row values are TMA-copied
to SMEM once; key blocks stream double-buffered (``mtile.stream``). Per key
block, with ``S = scale Q K^T`` (one ``wgmma``) and ``t = T(S)`` (the
declaration's transform, after the optional soft cap ``c tanh(S / c)``),
the mode's state ``(m, l, acc)`` moves on as in ``softattn.modes.update``::

    m', corr, e, l_add = block(m, t, valid);  l = l corr + l_add
    acc = acc corr + e V                        (a second ``wgmma``)

and ``finish`` gives ``out = acc / den`` and the two per-row residuals the
backward reads. Arrays (all padded to whole blocks by the wrapper):
``q [B, Lq, H, D]``, ``kT [B, H, D, Lk]``, ``v [B, Lk, H, Dv]``,
``rows [B, H, R, Lq]`` f32, ``mask [Bm, Hm, Lk]`` int32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from softattn import modes
from softattn.modes import MODES
from softattn.pallas.common import tile
from softattn.pallas.gpu.mosaic import columns
from softattn.pallas.gpu.mosaic import tile as mtile
from softattn.pallas.common.operands import out_dtype

plgpu = mtile.plgpu


GRID = ("batch", "head", "block")


def call(kernel, grid, outs, name, interpret):
  """``plgpu.kernel`` over ``GRID`` (its refs are in GMEM): the Mosaic GPU
  kernel, or (``interpret``) Mosaic GPU's interpreter running the same body.
  Not ``pallas_call``'s grid: its interpreter gives every program
  ``program_id`` 0 (jax 0.10), while it runs mesh axes (``axis_index``).
  The kernel's first argument after its partial ones: ``hw``, whether it is
  built for the hardware (``mtile.vector`` says what differs)."""
  return plgpu.kernel(
      functools.partial(kernel, not interpret), out_type=outs, grid=grid,
      grid_names=GRID,
      compiler_params=mtile.compiler_params(), kernel_name=name,
      interpret=mtile.interpret_params() if interpret else False)


def run(cfg, build, *args):
  """``build(interpret)(*args)``: the kernel when lowered for CUDA, the
  interpreter elsewhere, unless ``cfg.interpret`` fixes it."""
  if cfg.interpret is not None:
    return build(cfg.interpret)(*args)
  return jax.lax.platform_dependent(
      *args, cuda=lambda *a: build(False)(*a),
      default=lambda *a: build(True)(*a))


def key_sources(cfg, kT_ref, v_ref, mask_ref, s, b, h):
  """The streamed key-side operands of a query-block program."""
  at = lambda j: pl.ds(j * cfg.bk, cfg.bk)  # noqa: E731
  src = [(lambda j: kT_ref.at[b, h, :, at(j)], s["kT"], s["kT_bar"])]
  if v_ref is not None:
    src.append((lambda j: v_ref.at[b, at(j), h], s["v"], s["v_bar"]))
  if mask_ref is not None:
    bm = b if mask_ref.shape[0] > 1 else 0
    hm = h if cfg.mask_heads else 0
    src.append((lambda j: mask_ref.at[bm, hm, at(j)], s["mask"],
                s["mask_bar"]))
  return src


def key_scratch(cfg, dtype, stages, with_v=True):
  """SMEM for the streamed key blocks (``stages`` of each)."""
  st = stages
  s = {"kT": mtile.smem((st, cfg.d, cfg.bk), dtype),
       "kT_bar": mtile.barriers(st)}
  if with_v:
    s.update(v=mtile.smem((st, cfg.bk, cfg.dv), dtype),
             v_bar=mtile.barriers(st))
  if cfg.has_mask:
    s.update(mask=mtile.smem((st, cfg.bk), jnp.int32, operand=False),
             mask_bar=mtile.barriers(st))
  return s


def _ids():
  return tuple(jax.lax.axis_index(n) for n in GRID)


# -- statistics: n, mean, biased variance over valid keys (Chan's merge) ------
def _stats_math(cfg, hw, s, q0, k0, mask, na, ma, m2a):
  """One key block merged into the running ``(n, mean, M2)`` of each row."""
  sc, valid, _ = mtile.scores(cfg, s, q0, k0, mask, hw=hw)
  nb = jnp.sum(valid.astype(jnp.float32), axis=-1, keepdims=True)
  mb = jnp.sum(sc, axis=-1, keepdims=True) / jnp.maximum(nb, 1.0)
  c = jnp.where(valid, sc - mb, 0.0)
  m2b = jnp.sum(c * c, axis=-1, keepdims=True)
  n = na + nb
  delta = mb - ma
  mean = ma + delta * (nb / jnp.maximum(n, 1.0))
  return n, mean, m2a + m2b + delta * delta * (na * nb / jnp.maximum(n, 1.0))


def mask_vector(mask_view, hw, kept=1):
  """The key block's mask as a thin value (a ``[1, bk]`` row), or None."""
  if mask_view is None:
    return None
  return mtile.thin(mtile.vector(mask_view, None, hw, kept), kept)


def _stats_kernel(cfg, hw, q_ref, kT_ref, *refs):
  mask_ref = refs[0] if cfg.has_mask else None
  out_ref = refs[-1]
  b, h, qi = _ids()
  q0 = qi * cfg.bq

  def body(**s):
    mtile.fetch_now([(q_ref.at[b, pl.ds(q0, cfg.bq), h], s["q"],
                      s["q_bar"].at[0])])

    def step(kj, views, carry):
      mask = mask_vector(views[-1] if cfg.has_mask else None, hw)
      return columns.run(
          functools.partial(_stats_math, cfg, hw), mtile.mm(s["q"], views[0]),
          q0, kj * cfg.bk, mask, *map(columns.Col, carry))

    zero = mtile.full(cfg.bq, 0.0, hw)
    n, mean, m2 = mtile.stream(
        0, mtile.k_blocks(cfg, qi),
        key_sources(cfg, kT_ref, None, mask_ref, s, b, h), step,
        (zero, zero, zero))
    s["out"][0, :] = mean
    s["out"][1, :] = m2 / jnp.maximum(n, 1.0)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(s["out"], out_ref.at[b, h, :, pl.ds(q0, cfg.bq)])
    plgpu.wait_smem_to_gmem(0)

  pl.run_scoped(body, **mtile.fit(lambda st: dict(
      q=mtile.smem((cfg.bq, cfg.d), q_ref.dtype), q_bar=mtile.barriers(1),
      out=mtile.smem((2, cfg.bq), jnp.float32, operand=False),
      **key_scratch(cfg, q_ref.dtype, st, with_v=False))))


def moments(cfg: tile.Config, q, kT, mask):
  """``[B, H, 2, Lq]`` (mean, biased var) of each row's valid scores."""
  b, lq, h, _ = q.shape
  outs = [jax.ShapeDtypeStruct((b, h, 2, lq), jnp.float32)]
  args = (q, kT) + (() if mask is None else (mask,))
  build = lambda interpret: call(  # noqa: E731
      functools.partial(_stats_kernel, cfg),
      (b, h, lq // cfg.bq), outs, "softattn_mgpu_stats", interpret)
  return run(cfg, build, *args)[0]


# -- attention -----------------------------------------------------------------
def _block_math(cfg, hw, s, q0, k0, mask, rv, m, l):
  """``modes.update`` up to the ``e V`` product: ``(m', l', e, corr)``."""
  sc, valid, _ = mtile.scores(cfg, s, q0, k0, mask, hw=hw)
  t = tile.transform(cfg, sc, rv)
  m_new, corr, e, l_add = MODES[cfg.mode].block(m, t, valid, False)
  if corr is not None:
    l = l * corr
  if l_add is not None:
    l = l + l_add
  return m_new, l, e, corr


def _forward_kernel(cfg, hw, q_ref, kT_ref, v_ref, rows_ref, *refs):
  mask_ref = refs[0] if cfg.has_mask else None
  o_ref, res_ref = refs[-2:]
  b, h, qi = _ids()
  q0 = qi * cfg.bq
  nrow = rows_ref.shape[2]
  split = MODES[cfg.mode].split_pv

  def body(**s):
    mtile.fetch_now([
        (q_ref.at[b, pl.ds(q0, cfg.bq), h], s["q"], s["q_bar"].at[0]),
        (rows_ref.at[b, h, :, pl.ds(q0, cfg.bq)], s["rows"],
         s["q_bar"].at[1])])
    rv = mtile.row_values(cfg, s["rows"], hw)

    def step(kj, views, carry):
      m, l, acc = carry
      mask = mask_vector(views[2] if cfg.has_mask else None, hw)
      m, l, e, corr = columns.run(
          functools.partial(_block_math, cfg, hw), mtile.mm(s["q"], views[0]),
          q0, kj * cfg.bk, mask, rv, columns.Col(m), columns.Col(l))
      if corr is not None:
        acc = acc * mtile.widen(corr, acc.shape)
      return m, l, acc + mtile.mm_value(e, s["p"], views[1], split)

    m0 = MODES[cfg.mode].m0
    carry = (mtile.full(cfg.bq, m0, hw), mtile.full(cfg.bq, 0.0, hw),
             mtile.zeros((cfg.bq, cfg.dv), hw))
    carry = mtile.stream(0, mtile.k_blocks(cfg, qi),
                         key_sources(cfg, kT_ref, v_ref, mask_ref, s, b, h),
                         step, carry)
    m, l, acc = carry
    scalar = tile.scalar(cfg, rv)
    out, res_a, res_b = columns.run(
        lambda m, l, acc, eps: modes.output(cfg.mode, (m, l, acc), eps),
        columns.Col(m), columns.Col(l), acc, scalar)
    s["o"][...] = out.astype(o_ref.dtype)
    s["res"][0, :] = res_a
    s["res"][1, :] = res_b
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(s["o"], o_ref.at[b, pl.ds(q0, cfg.bq), h])
    plgpu.copy_smem_to_gmem(s["res"], res_ref.at[b, h, :, pl.ds(q0, cfg.bq)])
    plgpu.wait_smem_to_gmem(0)

  dtype = q_ref.dtype
  pl.run_scoped(body, **mtile.fit(lambda st: dict(
      q=mtile.smem((cfg.bq, cfg.d), dtype), q_bar=mtile.barriers(2),
      rows=mtile.smem((nrow, cfg.bq), jnp.float32, operand=False),
      p=mtile.smem((cfg.bq, cfg.bk), dtype),
      o=mtile.smem((cfg.bq, cfg.dv), o_ref.dtype),
      res=mtile.smem((2, cfg.bq), jnp.float32, operand=False),
      **key_scratch(cfg, dtype, st))))


def attention(cfg: tile.Config, q, kT, v, rows, mask):
  """``(out [B, Lq, H, Dv], res [B, H, 2, Lq])`` on padded arrays."""
  b, lq, h, _ = q.shape
  outs = [jax.ShapeDtypeStruct((b, lq, h, cfg.dv), out_dtype(cfg, v.dtype)),
          jax.ShapeDtypeStruct((b, h, 2, lq), jnp.float32)]
  args = (q, kT, v, rows) + (() if mask is None else (mask,))
  build = lambda interpret: call(  # noqa: E731
      functools.partial(_forward_kernel, cfg),
      (b, h, lq // cfg.bq), outs, "softattn_mgpu_forward", interpret)
  return run(cfg, build, *args)
