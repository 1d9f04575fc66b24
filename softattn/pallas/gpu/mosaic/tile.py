"""What the Mosaic GPU kernels share: blocks, shared-memory buffers, the
pipelined key (or query) stream, ``wgmma`` products and the tile math.

Programming model (Hopper, one warpgroup per program): operands live in
global memory (GMEM) and reach shared memory (SMEM) through TMA copies
(``plgpu.copy_gmem_to_smem``) that arrive on a barrier; every matmul is a
``plgpu.wgmma`` of two SMEM operands into an accumulator (``plgpu.ACC``);
the normalizer's math runs on the accumulator's registers. The tile math is
the other backends' (``common/tile.py``'s transform, ``softattn.modes``'
``block``/``finish``/``grad``), the scores are computed here because Mosaic
GPU has no ``dot_general`` on register values.

Forms chosen so that Mosaic GPU's interpreter (``InterpretGPUParams``, what
the tests run on CPU) runs the same kernel bodies as the hardware:

* no ``plgpu.transpose_ref``: the interpreter's ``wgmma`` cannot apply a
  ``TransposeTransform`` (it has no ``indices``), so the transposed operands
  (``K^T``, ``V^T``, ``Q^T``, ``dO^T``) are XLA transposes in GMEM made by
  the wrapper (one extra read and write of each; on hardware a transposed
  SMEM view would make them free);
* no ``pl.run_state`` accumulator carried across ``wgmma`` calls: the
  interpreter has no rule for ``run_state`` (a higher-order primitive), so
  each product gets a fresh zeroed ``ACC`` in ``pl.run_scoped`` and is added
  to a register carry (a second ``[b, d]`` f32 array live per program);
* no register operand in ``wgmma``: values (weights ``P``, ``dS``) are
  stored to an SMEM tile, ``commit_smem``, then multiplied;
* lengths are padded to the block by the wrapper (zeros, masked by
  position), not left to TMA's out-of-bounds fill, which the interpreter
  does not model;
* ``plgpu.kernel`` with named grid axes (``axis_index``), not
  ``pallas_call``'s grid, whose ``program_id`` is 0 in every program of
  jax 0.10's interpreter.

What only the hardware path has (``hw``; jax 0.10's interpreter runs
neither ``plgpu.load`` nor ``layout_cast``): the layouts of per-row vectors,
iotas and accumulators (``vector``, ``full``, ``iota``, ``zeros``). float32
inputs run in the interpreter only: Mosaic GPU's TF32 ``wgmma`` wants its
second operand K-major, a transposed view (above); ``gpu/backend.py`` sends
float32 to Triton.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from softattn.modes import MODES
from softattn.pallas.common import tile
# The key blocks a query block streams, shared with the other GPU backend.
from softattn.pallas.common.tile import k_blocks, q_first  # noqa: F401
from softattn.pallas.gpu.mosaic import columns

try:  # Mosaic GPU's Pallas API; missing pieces mean "use Triton" (wrapper)
  from jax.experimental.pallas import mosaic_gpu as plgpu
except ImportError:  # pragma: no cover - a jax without Mosaic GPU
  plgpu = None

# wgmma's M is 64 rows per warpgroup, so query (and, in dK/dV, key) blocks
# are 64; key blocks are 64 too (N of ``Q K^T``, K of ``P V``). The smallest
# legal kernel, not a tuned one (no GPU here to tune on).
BLOCK = 64
BLOCKS = (64, 128, 256)  # forced ones: multiples of M, N <= 256
HEAD_DIMS = (64, 128, 256)
# Shared memory one Hopper program may take (what Mosaic GPU reports as
# ``max_smem_bytes`` for sm_90; Triton reported the same on an H200).
SMEM_BYTES = 232448
DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
# The constructs the kernels use: a jax without any of them runs Triton.
NEEDED = ("kernel", "copy_gmem_to_smem", "copy_smem_to_gmem", "wgmma",
          "Barrier", "barrier_wait", "commit_smem", "wait_smem_to_gmem", "ACC",
          "SMEM", "GMEM", "TilingTransform", "SwizzleTransform",
          "CompilerParams", "Layout", "layout_cast", "load",
          "broadcasted_iota")


def missing_api() -> tuple[str, ...]:
  """Names of ``NEEDED`` this jax's ``pallas.mosaic_gpu`` lacks (all of
  them without the module)."""
  if plgpu is None:
    return NEEDED
  return tuple(n for n in NEEDED if not hasattr(plgpu, n))


def interpret_params():
  """Mosaic GPU's interpret mode: ``InterpretGPUParams`` (public from jax
  0.11, under ``jax._src`` before)."""
  cls = getattr(plgpu, "InterpretGPUParams", None)
  if cls is None:
    from jax._src.pallas.mosaic_gpu.interpret import params  # noqa: PLC0415
    cls = params.InterpretGPUParams
  return cls()


def padded(length: int, block: int) -> int:
  return pl.cdiv(length, block) * block


def transforms(dtype, minor: int):
  """SMEM tiling and swizzle for a ``[rows, minor]`` wgmma operand: the
  widest swizzle (128, 64 or 32 bytes) dividing a row, tiles of 8 rows by
  one swizzle span."""
  row = minor * jnp.dtype(dtype).itemsize
  swizzle = next(s for s in (128, 64, 32) if row % s == 0)
  return (plgpu.TilingTransform((8, swizzle // jnp.dtype(dtype).itemsize)),
          plgpu.SwizzleTransform(swizzle))


def smem(shape, dtype, operand=True):
  """An SMEM buffer; ``operand``: laid out for ``wgmma`` (tiled,
  swizzled)."""
  kw = {"transforms": transforms(dtype, shape[-1])} if operand else {}
  return plgpu.SMEM(tuple(shape), dtype, **kw)


def barriers(n: int = 2):
  return plgpu.Barrier(num_barriers=n)


def fetch_now(copies):
  """TMA ``(src, dst, barrier)`` copies, then wait for all of them."""
  for src, dst, bar in copies:
    plgpu.copy_gmem_to_smem(src, dst, bar)
  for _, _, bar in copies:
    plgpu.barrier_wait(bar)


def fit(make):
  """``make(stages)``: a kernel's scratch, double-buffered (2 stages) where
  that fits ``SMEM_BYTES``, else single-buffered (head dim 256). One that
  fits neither way (float32 at head dim 256, which only the interpreter
  runs; blocks forced too large) is Mosaic GPU's lowering error on a GPU:
  not raised here, where ``platform_dependent`` traces the GPU branch on a
  CPU too."""
  def nbytes(scratch):  # + 1 KiB a buffer for alignment
    return sum(int(np.prod(v.shape)) * jnp.dtype(v.dtype).itemsize + 1024
               for v in scratch.values()
               if not isinstance(v, plgpu.Barrier))
  scratch = make(2)
  return scratch if nbytes(scratch) <= SMEM_BYTES else make(1)


def stream(first, count, sources, body, carry):
  """``body(j, views, carry)`` for blocks ``j = first .. first+count-1``.
  ``sources``: ``(src(j) -> GMEM view, buf [stages, ...] SMEM, bars
  Barrier(stages))``; ``views``: each buffer's slot holding block ``j``.
  Two stages double-buffer: block ``j+1``'s TMA copies run while block ``j``
  computes. A slot is refilled one step after its last use, when that
  step's ``wgmma`` results were read (the read waits for them), so one
  warpgroup needs no "consumed" barrier. One stage: copy, wait, compute.
  """
  stages = sources[0][1].shape[0]

  def fetch(j, slot):
    for src, buf, bar in sources:
      plgpu.copy_gmem_to_smem(src(j), buf.at[slot], bar.at[slot])

  def ready(i, slot, carry):
    for _, _, bar in sources:
      plgpu.barrier_wait(bar.at[slot])
    return body(first + i, [buf.at[slot] for _, buf, _ in sources], carry)

  if stages == 1:
    def step(i, carry):
      fetch(first + i, 0)
      return ready(i, 0, carry)
    return jax.lax.fori_loop(0, count, step, carry)

  @pl.when(count > 0)
  def _():
    fetch(first, 0)

  def step2(i, carry):
    slot = jax.lax.rem(i, 2)

    @pl.when(i + 1 < count)
    def _():
      fetch(first + i + 1, 1 - slot)

    return ready(i, slot, carry)

  return jax.lax.fori_loop(0, count, step2, carry)


def mm(a_ref, b_ref):
  """``a @ b`` of two SMEM operands (``[m, k]``, ``[k, n]``) in f32."""
  m, n = a_ref.shape[0], b_ref.shape[1]

  def product(acc):
    plgpu.wgmma(acc, a_ref, b_ref)
    return acc[...]
  return pl.run_scoped(product, plgpu.ACC((m, n), jnp.float32))


def mm_value(x, scratch, b_ref, split=False):
  """``x @ b`` for a register value ``x`` (staged in the SMEM tile
  ``scratch``, in its dtype). ``split``: ``x`` as ``hi + lo`` of that dtype
  when it is narrower than f32 (``softattn.modes.pv`` says why the ratio
  mode wants it)."""
  hi = x.astype(scratch.dtype)
  scratch[...] = hi
  plgpu.commit_smem()
  out = mm(scratch, b_ref)
  if split and jnp.dtype(scratch.dtype).itemsize < 4:
    scratch[...] = (x - hi.astype(x.dtype)).astype(scratch.dtype)
    plgpu.commit_smem()
    out = out + mm(scratch, b_ref)
  return out


def _load(ref, hw: bool, kept: int):
  """A vector from a 1-D SMEM view: on hardware in the ``WGMMA`` row
  (``kept=0``: one value per tile row) or column (``kept=1``) layout, which
  plain indexing does not give a 64-element vector; in the interpreter
  (which runs neither ``plgpu.load`` nor ``layout_cast`` in jax 0.10) by
  indexing."""
  if not hw:
    return ref[...]
  layout = plgpu.Layout.WGMMA.reduce(1 - kept)
  if "idx" in inspect.signature(plgpu.load).parameters:  # jax <= 0.10
    return plgpu.load(ref, (slice(None),), layout=layout)
  return plgpu.load(ref, layout=layout)


def vector(ref, i, hw: bool, kept: int = 0):
  """Row ``i`` of a ``[R, b]`` SMEM block (or a 1-D block: ``i`` None) of
  per-row values, as a vector (``kept``: the tile axis it runs along)."""
  return _load(ref if i is None else ref.at[i], hw, kept)


def thin(x, kept: int):
  """``x`` marked as a ``[b, 1]`` column (``kept=0``) or ``[1, n]`` row for
  ``columns.run``."""
  return columns.Col(x) if kept == 0 else columns.Row(x)


def full(size: int, value, hw: bool):
  """A ``[size]`` f32 vector of ``value`` in the tile-row layout."""
  x = jnp.full((size,), value, jnp.float32)
  return plgpu.layout_cast(x, plgpu.Layout.WGMMA.reduce(1)) if hw else x


def zeros(shape, hw: bool):
  """An f32 accumulator tile of zeros, in ``wgmma``'s layout on hardware (a
  loop carry keeps one layout; a plain splat is not the products')."""
  x = jnp.zeros(shape, jnp.float32)
  return plgpu.layout_cast(x, plgpu.Layout.WGMMA) if hw else x


def widen(x, shape, kept: int = 0):
  """A per-row vector broadcast over a tile's other axis."""
  return jax.lax.broadcast_in_dim(x, shape, (kept,))


def row_values(cfg: tile.Config, ref, hw: bool, kept: int = 0):
  """``{name: Col/Row}`` of a ``[R, b]`` SMEM block of per-row values."""
  return {name: thin(vector(ref, i, hw, kept), kept)
          for i, name in enumerate(cfg.row_names)}


def iota(shape, axis: int, hw: bool):
  """Positions along ``axis`` of a tile, in the ``WGMMA`` layout on hardware
  (Mosaic GPU cannot infer an iota's layout; the interpreter of jax 0.10
  runs no ``layout_cast``)."""
  if hw:
    return plgpu.broadcasted_iota(jnp.int32, shape, axis,
                                  layout=plgpu.Layout.WGMMA)
  return jax.lax.broadcasted_iota(jnp.int32, shape, axis)


def scores(cfg: tile.Config, s, q0, k0, mask, transposed=False, hw=False):
  """``(s, valid, slope)`` of one tile from the raw product ``s`` (``q k^T``,
  or ``k q^T`` when ``transposed``): ``u = scale s``, 0 where invalid, then
  with ``cfg.logits_soft_cap`` ``c``: ``s = c tanh(u / c)`` and ``slope =
  ds/du = (1 - t)(1 + t)``, ``t = tanh(u / c)`` (``common/tile.scores``
  says why not ``1 - t^2``); else ``slope`` None and ``s = u``. ``valid``:
  inside both true lengths, causal, and the key mask (``[1, bk]``, or
  ``[bk, 1]`` transposed)."""
  qa, ka = (1, 0) if transposed else (0, 1)
  qpos = q0 + iota(s.shape, qa, hw)
  kpos = k0 + iota(s.shape, ka, hw)
  valid = jnp.logical_and(kpos < cfg.lk, qpos < cfg.lq)
  if cfg.causal:
    valid = jnp.logical_and(valid, kpos <= qpos)
  if mask is not None:
    valid = jnp.logical_and(valid, mask != 0)
  s = jnp.where(valid, s * cfg.scale, 0.0)
  cap = cfg.logits_soft_cap
  if cap is None:
    return s, valid, None
  t = jnp.tanh(s / cap)
  return cap * t, valid, (1.0 - t) * (1.0 + t)


def grads(cfg: tile.Config, s, valid, dp, rv, brows, drows, slope):
  """``(w, ds, row_cotangents)`` on one tile (either orientation: every
  step is elementwise with per-row values broadcast): the mode's ``grad``
  gives the weights and ``dt``; ``jax.vjp`` of the declaration's transform
  gives ``ds`` and the row columns' cotangents; moments add their own
  dependence on ``s``; the soft cap's ``slope`` (``scores``) takes ``ds`` back
  to the raw scores. ``brows``: ``(res_a, res_b, di)``; ``drows``:
  ``(dmean, dvar)`` or None."""
  names = cfg.diff_names

  def t_of(s, *cols):
    return tile.transform(cfg, s, {**rv, **dict(zip(names, cols))})

  t, vjp = jax.vjp(t_of, s, *[rv[n] for n in names])
  w, dt = MODES[cfg.mode].grad(t, valid, dp, *brows)
  ds, *dcols = vjp(dt)
  if drows is not None:
    dmean, dvar = drows
    ds = ds + (dmean + 2.0 * dvar * (s - rv["mean"])) / jnp.maximum(rv["n"],
                                                                    1.0)
  if slope is not None:
    ds = ds * slope
  return jnp.where(valid, w, 0.0), jnp.where(valid, ds, 0.0), dcols


def compiler_params():
  return plgpu.CompilerParams()
