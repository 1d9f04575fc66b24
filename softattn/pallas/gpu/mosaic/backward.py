"""Mosaic GPU backward kernels: dQ with the per-row cotangents (one program
per query block, key blocks streamed) and dK/dV (one program per key block,
query blocks streamed), FlashAttention-2's backward (Dao 2023, Alg. 2)
generic over the mode, as ``gpu/triton/backward.py``.

Per tile, with ``S`` the (soft-capped) scores and ``dP = dO V^T``::

    w, dt = grad(t, valid, dP, res_a, res_b, di);  dS = dt dt/dS (vjp)
    dQ += dS K,   dK += dS^T Q,   dV += w^T dO      (scaled by ``scale``)

The dK/dV program computes its tiles transposed, keys as rows
(``S^T = K Q^T``, ``dP^T = V dO^T``), so that ``w^T`` and ``dS^T`` are what
it holds and every product is a plain ``wgmma`` (``mtile``'s module doc says
why there is no transposed SMEM view); per-query values enter as ``[1, bq]``
rows. For ``needs == "moments"`` the wrapper runs the dQ kernel first for the
row cotangents alone (``with_dq=False``), then with them, as on TPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from softattn.pallas.common.operands import n_diff
from softattn.pallas.gpu.mosaic import columns
from softattn.pallas.gpu.mosaic import forward as mfwd
from softattn.pallas.gpu.mosaic import tile as mtile

plgpu = mtile.plgpu


def _rows_of(cfg, views, hw, kept):
  """``(rv, brows, drows)`` as thin values from the row-value views
  ``[rows, brows, drows?]`` (``kept``: 0 for ``[bq, bk]`` tiles, 1 for the
  transposed ``[bk, bq]`` ones)."""
  def col(ref, i):
    return mtile.thin(mtile.vector(ref, i, hw, kept), kept)
  rv = mtile.row_values(cfg, views[0], hw, kept)
  brows = tuple(col(views[1], i) for i in range(3))
  drows = None if len(views) < 3 else tuple(col(views[2], i)
                                            for i in range(2))
  return rv, brows, drows


def _grads_math(cfg, hw, s, dp, q0, k0, mask, rv, brows, drows, transposed):
  """``(w, ds, row_cotangents)`` of one tile from the raw products."""
  sc, valid, slope = mtile.scores(cfg, s, q0, k0, mask, transposed, hw)
  return mtile.grads(cfg, sc, valid, dp, rv, brows, drows, slope)


def _row_arrays(rows, brows, drows):
  return [x for x in (rows, brows, drows) if x is not None]


def _row_scratch(arrays, bq):
  return {f"r{i}": mtile.smem((x.shape[2], bq), jnp.float32, operand=False)
          for i, x in enumerate(arrays)}


# -- dQ and the per-row cotangents ---------------------------------------------
def _dq_kernel(cfg, with_dq, n_rows, hw, q_ref, do_ref, kT_ref, vT_ref, k_ref,
               *refs):
  row_refs, rest = refs[:n_rows], refs[n_rows:]
  mask_ref = rest[0] if cfg.has_mask else None
  dq_ref, dr_ref = rest[-2:] if with_dq else (None, rest[-1])
  b, h, qi = mfwd._ids()
  q0 = qi * cfg.bq
  qs = pl.ds(q0, cfg.bq)
  nd = n_diff(cfg)

  def body(**s):
    mtile.fetch_now(
        [(q_ref.at[b, qs, h], s["q"], s["bar"].at[0]),
         (do_ref.at[b, qs, h], s["do"], s["bar"].at[1])]
        + [(r.at[b, h, :, qs], s[f"r{i}"], s["bar"].at[2 + i])
           for i, r in enumerate(row_refs)])
    rv, brows, drows = _rows_of(cfg, [s[f"r{i}"] for i in range(n_rows)],
                                hw, 0)
    ks = lambda j: pl.ds(j * cfg.bk, cfg.bk)  # noqa: E731
    sources = [(lambda j: kT_ref.at[b, h, :, ks(j)], s["kT"], s["kT_bar"]),
               (lambda j: vT_ref.at[b, h, :, ks(j)], s["vT"], s["vT_bar"]),
               (lambda j: k_ref.at[b, ks(j), h], s["k"], s["k_bar"])]
    if mask_ref is not None:
      bm = b if mask_ref.shape[0] > 1 else 0
      hm = h if cfg.mask_heads else 0
      sources.append((lambda j: mask_ref.at[bm, hm, ks(j)], s["mask"],
                      s["mask_bar"]))

    def step(kj, views, carry):
      dq, dr = carry
      mask = mfwd.mask_vector(views[3] if cfg.has_mask else None, hw)
      _, ds, dcols = columns.run(
          functools.partial(_grads_math, cfg, hw, transposed=False),
          mtile.mm(s["q"], views[0]), mtile.mm(s["do"], views[1]), q0,
          kj * cfg.bk, mask, rv, brows, drows)
      dr = tuple(a + c for a, c in zip(dr, dcols)) + dr[len(dcols):]
      if with_dq:
        dq = dq + mtile.mm_value(ds, s["ds"], views[2])
      return dq, dr

    zero = mtile.full(cfg.bq, 0.0, hw)
    dq0 = mtile.zeros((cfg.bq, cfg.d), hw) if with_dq else zero
    dq, dr = mtile.stream(0, mtile.k_blocks(cfg, qi), sources, step,
                          (dq0, (zero,) * nd))
    for i, x in enumerate(dr):
      s["dr"][i, :] = x
    if with_dq:  # the q buffer is free now: dq's staging tile
      s["q"][...] = (dq * cfg.scale).astype(dq_ref.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(s["dr"], dr_ref.at[b, h, :, qs])
    if with_dq:
      plgpu.copy_smem_to_gmem(s["q"], dq_ref.at[b, qs, h])
    plgpu.wait_smem_to_gmem(0)

  def scratch(st):
    dtype = q_ref.dtype
    out = dict(
        q=mtile.smem((cfg.bq, cfg.d), dtype),
        do=mtile.smem((cfg.bq, cfg.dv), dtype),
        bar=mtile.barriers(2 + n_rows),
        kT=mtile.smem((st, cfg.d, cfg.bk), dtype), kT_bar=mtile.barriers(st),
        vT=mtile.smem((st, cfg.dv, cfg.bk), dtype), vT_bar=mtile.barriers(st),
        k=mtile.smem((st, cfg.bk, cfg.d), dtype), k_bar=mtile.barriers(st),
        ds=mtile.smem((cfg.bq, cfg.bk), dtype),
        dr=mtile.smem((nd, cfg.bq), jnp.float32, operand=False),
        **_row_scratch(row_refs, cfg.bq))
    if cfg.has_mask:
      out.update(mask=mtile.smem((st, cfg.bk), jnp.int32, operand=False),
                 mask_bar=mtile.barriers(st))
    return out
  pl.run_scoped(body, **mtile.fit(scratch))


def dq_and_rows(cfg, t, rows, brows, drows, mask, with_dq=True):
  """``(dq [B, Lq, H, D] or None, drows [B, H, n_diff, Lq])``; ``t``: the
  padded operands (``wrapper.Operands``)."""
  b, lq, h, _ = t.q.shape
  arrays = _row_arrays(rows, brows, drows)
  outs = [jax.ShapeDtypeStruct((b, h, n_diff(cfg), lq), jnp.float32)]
  if with_dq:
    outs.insert(0, jax.ShapeDtypeStruct(t.q.shape, t.q.dtype))
  args = (t.q, t.do, t.kT, t.vT, t.k, *arrays) + (
      () if mask is None else (mask,))
  build = lambda interpret: mfwd.call(  # noqa: E731
      functools.partial(_dq_kernel, cfg, with_dq, len(arrays)),
      (b, h, lq // cfg.bq), outs,
      "softattn_mgpu_dq" if with_dq else "softattn_mgpu_drows", interpret)
  out = mfwd.run(cfg, build, *args)
  return (out[0], out[1]) if with_dq else (None, out[0])


# -- dK and dV ---------------------------------------------------------------
def _dkv_kernel(cfg, n_rows, hw, k_ref, v_ref, qT_ref, doT_ref, q_ref, do_ref,
                *refs):
  row_refs, rest = refs[:n_rows], refs[n_rows:]
  mask_ref = rest[0] if cfg.has_mask else None
  dk_ref, dv_ref = rest[-2:]
  b, h, kj = mfwd._ids()
  k0 = kj * cfg.bk
  kslice = pl.ds(k0, cfg.bk)

  def body(**s):
    copies = [(k_ref.at[b, kslice, h], s["k"], s["bar"].at[0]),
              (v_ref.at[b, kslice, h], s["v"], s["bar"].at[1])]
    if mask_ref is not None:
      bm = b if mask_ref.shape[0] > 1 else 0
      hm = h if cfg.mask_heads else 0
      copies.append((mask_ref.at[bm, hm, kslice], s["mask"], s["bar"].at[2]))
    mtile.fetch_now(copies)
    mask = mfwd.mask_vector(s["mask"] if cfg.has_mask else None, hw, kept=0)
    qs = lambda j: pl.ds(j * cfg.bq, cfg.bq)  # noqa: E731
    sources = [(lambda j: qT_ref.at[b, h, :, qs(j)], s["qT"], s["qT_bar"]),
               (lambda j: doT_ref.at[b, h, :, qs(j)], s["doT"], s["doT_bar"]),
               (lambda j: q_ref.at[b, qs(j), h], s["q"], s["q_bar"]),
               (lambda j: do_ref.at[b, qs(j), h], s["do"], s["do_bar"])]
    for i, r in enumerate(row_refs):
      sources.append((lambda j, r=r: r.at[b, h, :, qs(j)], s[f"r{i}"],
                      s[f"r{i}_bar"]))

    def step(qi, views, carry):
      dk, dv = carry
      rv, brows, drows = _rows_of(cfg, views[4:], hw, 1)
      w, ds, _ = columns.run(
          functools.partial(_grads_math, cfg, hw, transposed=True),
          mtile.mm(s["k"], views[0]), mtile.mm(s["v"], views[1]),
          qi * cfg.bq, k0, mask, rv, brows, drows)
      # One staging tile: w's product has been read (waited) before ds
      # overwrites it.
      dv = dv + mtile.mm_value(w, s["p"], views[3])
      dk = dk + mtile.mm_value(ds, s["p"], views[2])
      return dk, dv

    first = mtile.q_first(cfg, kj)
    carry = (mtile.zeros((cfg.bk, cfg.d), hw),
             mtile.zeros((cfg.bk, cfg.dv), hw))
    dk, dv = mtile.stream(first, pl.cdiv(cfg.lq, cfg.bq) - first, sources,
                          step, carry)
    # k and v are read for the last time: their buffers stage dk and dv.
    s["k"][...] = (dk * cfg.scale).astype(dk_ref.dtype)
    s["v"][...] = dv.astype(dv_ref.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(s["k"], dk_ref.at[b, kslice, h])
    plgpu.copy_smem_to_gmem(s["v"], dv_ref.at[b, kslice, h])
    plgpu.wait_smem_to_gmem(0)

  def scratch(st):
    dtype = k_ref.dtype
    out = dict(
        k=mtile.smem((cfg.bk, cfg.d), dtype),
        v=mtile.smem((cfg.bk, cfg.dv), dtype), bar=mtile.barriers(3),
        qT=mtile.smem((st, cfg.d, cfg.bq), dtype), qT_bar=mtile.barriers(st),
        doT=mtile.smem((st, cfg.dv, cfg.bq), dtype),
        doT_bar=mtile.barriers(st),
        q=mtile.smem((st, cfg.bq, cfg.d), dtype), q_bar=mtile.barriers(st),
        do=mtile.smem((st, cfg.bq, cfg.dv), dtype), do_bar=mtile.barriers(st),
        p=mtile.smem((cfg.bk, cfg.bq), dtype))
    for i, r in enumerate(row_refs):
      out[f"r{i}"] = mtile.smem((st, r.shape[2], cfg.bq), jnp.float32,
                                operand=False)
      out[f"r{i}_bar"] = mtile.barriers(st)
    if cfg.has_mask:
      out["mask"] = mtile.smem((cfg.bk,), jnp.int32, operand=False)
    return out
  pl.run_scoped(body, **mtile.fit(scratch))


def dk_dv(cfg, t, rows, brows, drows, mask):
  """``(dk, dv)`` in the inputs' dtypes, ``[B, Lk, H, D]``, ``[B, Lk, H, Dv]``
  (padded lengths)."""
  b, lk, h, _ = t.k.shape
  arrays = _row_arrays(rows, brows, drows)
  outs = [jax.ShapeDtypeStruct(t.k.shape, t.k.dtype),
          jax.ShapeDtypeStruct(t.v.shape, t.v.dtype)]
  args = (t.k, t.v, t.qT, t.doT, t.q, t.do, *arrays) + (
      () if mask is None else (mask,))
  build = lambda interpret: mfwd.call(  # noqa: E731
      functools.partial(_dkv_kernel, cfg, len(arrays)),
      (b, h, lk // cfg.bk), outs, "softattn_mgpu_dkv", interpret)
  return mfwd.run(cfg, build, *args)
