"""The fused threshold streams' weighted pass skips the tiles whose weights
are all zero (``softattn/pallas/common/streams.py``, step 5;
``softattn/pallas/tpu/skip.py``), in the Pallas interpreter.

Inputs are built so that some tiles really are dead: keys come in clusters
of one block each along orthogonal directions, each query block sits
between the first cluster and one other, so every row's support lies in
those two key blocks and the other tiles of its query block are dead (far
from tau, not marginally).
Lengths are ragged (blocks of 16), under a key mask with a fully masked
batch element, and causal. Checked: the live table is exactly the tiles
where the dense weights are nonzero; outputs and q/k/v gradients equal
dense (``test_pallas.py``'s float32 bound) and, bit for bit, the path
without tables; the kernels skip what the table marks dead; a tile with one
live weight is kept; no other normalizer's kernels take a table.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import dot_product_attention, pallas
from softattn import normalizers as N
from softattn.modes import NEG
from softattn.pallas.common import streams
from softattn.pallas.tpu import skip
from tests.test_pallas import grads_of

B, H, D = 2, 2, 8
BLOCK = 16
# (q_len, k_len, key mask?, causal?): ragged blocks of 16 either way.
CASES = {"key_mask": (40, 56, True, False), "causal": (56, 56, False, True)}
NAMES = ["sparsemax", "entmax15", "prenorm(entmax15)"]
LONE = (5, 3)   # (query row, key block) of the tile with one live weight


def _inputs(case, lone=False):
  """``(q, k, v, mask)``: key block ``j`` along direction ``e_j``, query
  block ``i`` between ``e_0`` and ``e_{i mod nk}`` (3 times unit vectors
  plus 0.2 noise: scores ~2.2 to those two clusters, ~0 to the others), so
  the live tiles are columns 0 and a diagonal, not a symmetric pattern.
  ``lone``: one query row and one key of another block share a direction
  no one else has, which puts exactly one live weight in that tile
  (``LONE``)."""
  lq, lk, use_mask, _ = CASES[case]
  rng = np.random.default_rng(0)
  nk = -(-lk // BLOCK)
  eye = np.eye(D, dtype=np.float32)
  kdir = eye[np.arange(lk) // BLOCK]
  qdir = eye[(np.arange(lq) // BLOCK) % nk] + eye[0]
  qdir /= np.linalg.norm(qdir, axis=-1, keepdims=True)
  if lone:
    row, block = LONE
    qdir[row] = kdir[block * BLOCK + 2] = eye[D - 1]
  noise = lambda l: 0.2 * rng.standard_normal((B, l, H, D))  # noqa: E731
  q = 3.0 * qdir[None, :, None] + noise(lq)
  k = 3.0 * kdir[None, :, None] + noise(lk)
  v = rng.standard_normal((B, lk, H, D))
  mask = None
  if use_mask:
    mask = rng.random((B, 1, 1, lk)) < 0.7
    mask[1] = False  # batch element 1: every key masked
    if lone:
      mask[0, ..., LONE[1] * BLOCK + 2] = True
  return tuple(np.asarray(x, np.float32) for x in (q, k, v)) + (mask,)


def _kw(case, impl):
  _, _, use_mask, causal = CASES[case]
  kw = dict(is_causal=causal, implementation=impl)
  return kw | (dict(chunk_size=BLOCK) if impl == "pallas" else {})


@contextlib.contextmanager
def _patched(module, name, fn):
  original = getattr(module, name)
  setattr(module, name, fn(original))
  try:
    yield
  finally:
    setattr(module, name, original)


def _recording(seen):
  """``streams.live_tiles`` appending each table to ``seen`` as it runs."""
  def wrap(original):
    def live_tiles(*args):
      live = original(*args)
      jax.debug.callback(lambda x: seen.append(np.asarray(x)), live)
      return live
    return live_tiles
  return wrap


def _without_tables(original):
  """``streams.threshold_attention`` as before the skip: no block maxima,
  no table, every tile computed."""
  return lambda *args, tiles=None: original(*args, tiles=None)


@functools.lru_cache(maxsize=None)
def _fused(name, case, tables=True, lone=False):
  """``([out, dq, dk, dv], live table or None)`` of the fused path, or of
  the path without tables."""
  q, k, v, mask = _inputs(case, lone)
  mask = None if mask is None else jnp.asarray(mask)
  seen = []
  with _patched(streams, "live_tiles", _recording(seen)), (
      contextlib.nullcontext() if tables else
      _patched(streams, "threshold_attention", _without_tables)):
    got = grads_of(q, k, v, name, mask=mask, **_kw(case, "pallas"))
  assert len(seen) == (1 if tables else 0), len(seen)
  return got, (seen[0] if tables else None)


@functools.lru_cache(maxsize=None)
def _dense(name, case, dtype, lone=False):
  """``[out, dq, dk, dv]`` of the dense path in ``dtype`` (f32 or f64)."""
  q, k, v, mask = _inputs(case, lone)
  with jax.enable_x64(dtype == "f64"):
    dtype = jnp.float64 if dtype == "f64" else jnp.float32
    cast = lambda x: jnp.asarray(x, dtype)  # noqa: E731
    return grads_of(cast(q), cast(k), cast(v), name,
                    mask=None if mask is None else jnp.asarray(mask),
                    **_kw(case, "dense"))


def _nonzero_tiles(name, case, lone=False):
  """``[B, H, nq, nk]``: tiles where the dense weights are not all 0."""
  q, k, v, mask = _inputs(case, lone)
  _, w = dot_product_attention(
      q, k, v, normalizer=name, mask=mask, return_weights=True,
      **_kw(case, "dense"))
  w = np.asarray(w) != 0
  b, h, lq, lk = w.shape
  nq, nk = -(-lq // BLOCK), -(-lk // BLOCK)
  w = np.pad(w, ((0, 0), (0, 0), (0, nq * BLOCK - lq), (0, nk * BLOCK - lk)))
  return w.reshape(b, h, nq, BLOCK, nk, BLOCK).any(axis=(3, 5))


# prenorm's first causal rows standardise 1-3 scores of one cluster (a tiny
# variance), which amplifies the fused path's other summation order: dQ is
# 5e-5 of its scale from the truth here, as without any skipping (the
# results are the same bits, below).
F32_TOL = {"prenorm(entmax15)": 1e-4}


def _check_f32(name, case, got, lone=False):
  """``test_pallas.check_f32``'s bound: within 2e-5 of each array's scale
  of the float64 truth (``F32_TOL``), or 2x dense float32's own error."""
  truth, dense = _dense(name, case, "f64", lone), _dense(name, case, "f32",
                                                         lone)
  tol = F32_TOL.get(name, 2e-5)
  for label, t, d, g in zip(["out", "dq", "dk", "dv"], truth, dense, got):
    assert np.all(np.isfinite(g)), label
    err, dense_err = np.max(np.abs(t - g)), np.max(np.abs(t - d))
    assert err <= max(tol * (1.0 + np.max(np.abs(t))), 2 * dense_err), (
        label, err, dense_err)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_dead_tiles_are_skipped_and_the_results_equal_dense(name, case):
  got, live = _fused(name, case)
  # The table is the tiles with a nonzero dense weight, exactly: the
  # constructed dead tiles are dead (and skipped), no live one is lost.
  nonzero = _nonzero_tiles(name, case)
  assert live.shape == nonzero.shape
  np.testing.assert_array_equal(live, nonzero)
  _, _, _, causal = CASES[case]
  nq, nk = live.shape[2:]
  needed = np.tril(np.ones((nq, nk), bool)) if causal else np.ones((nq, nk),
                                                                    bool)
  dead = np.sum(~live & needed) / (B * H * np.sum(needed))
  assert dead >= 0.25, dead
  if not causal:   # batch element 1 has no valid key: nothing is live
    assert not live[1].any()
  _check_f32(name, case, got)
  # Skipping adds nothing and drops nothing: the path without tables (every
  # tile computed, as before the skip) gives the same bits.
  every, _ = _fused(name, case, tables=False)
  for label, a, b in zip(["out", "dq", "dk", "dv"], got, every):
    np.testing.assert_array_equal(a, b, err_msg=label)


def test_a_tile_with_one_live_weight_is_kept():
  """One query row shares a direction with one key of another block: that
  tile holds a single nonzero weight (the row's only one, 1.0 under
  sparsemax), is live, and the row's output is that key's value."""
  case = "key_mask"
  got, live = _fused("sparsemax", case, lone=True)
  row, block = LONE
  q, k, v, mask = _inputs(case, lone=True)
  _, w = dot_product_attention(q, k, v, normalizer="sparsemax", mask=mask,
                               return_weights=True, **_kw(case, "dense"))
  w = np.asarray(w)
  tile = w[0, :, :BLOCK, block * BLOCK:(block + 1) * BLOCK]
  assert np.count_nonzero(tile, axis=(1, 2)).tolist() == [1] * H
  assert tile[:, row, 2].tolist() == [1.0] * H
  assert live[0, :, 0, block].all()
  np.testing.assert_array_equal(live, _nonzero_tiles("sparsemax", case,
                                                     lone=True))
  np.testing.assert_allclose(got[0][0, row], v[0, block * BLOCK + 2],
                             atol=2e-5)
  _check_f32("sparsemax", case, got, lone=True)


def test_fetch_table_points_dead_tiles_at_a_live_block():
  """Live tiles read their own block; dead ones ``-1 - f`` with ``f`` the
  last live block before (the first after, for leading dead tiles; 0 in a
  row with none), so consecutive grid steps keep one block (no DMA)."""
  live = np.array([[0, 1, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0],
                   [1, 0, 0, 0, 0, 1]], bool)
  want = np.array([[-2, 1, -2, -2, 4, -5], [-1, -1, -1, -1, -1, -1],
                   [0, -1, -1, -1, -1, 5]])
  np.testing.assert_array_equal(skip.fetch_table(jnp.asarray(live)), want)
  # A block of two heads is live where either is; dK/dV's table is by key.
  per_head = np.stack([live, np.zeros_like(live)])[None]    # [1, 2, 3, 6]
  by_q, by_k = skip.tables(jnp.asarray(per_head), hp=2)
  np.testing.assert_array_equal(by_q[0, 0], want)
  np.testing.assert_array_equal(by_k[0, 0], skip.fetch_table(
      jnp.asarray(live.T)))


def test_live_tiles_keep_anything_near_tau():
  """Dead: every row's block max below tau by more than the margin, or no
  valid key (NEG); a max within the margin, or a NaN, is live; the rows
  past Lq of a ragged last query block are dead."""
  tau = jnp.full((1, 1, 3, 1), 2.0)
  margin = streams.LIVE_MARGIN * 3.0
  bmax = jnp.array([[1.0, 2.0 - 2 * margin, 2.0 - margin / 2, NEG,
                     jnp.nan]] * 3)[None, None]
  live = streams.live_tiles(bmax, tau, bq=2)                 # [1, 1, 2, 5]
  np.testing.assert_array_equal(live[0, 0], [[False, False, True, False, True]
                                             ] * 2)


def _prefetching_kernels(name, **kw):
  """``{kernel name: [scalar-prefetch operands of each call]}`` of a
  forward and backward program."""
  found = {}

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "pallas_call":
        info = eqn.params.get("name") or eqn.params.get("name_and_src_info")
        label = str(info).split()[0]
        found.setdefault(label, []).append(
            eqn.params["grid_mapping"].num_index_operands)
      for sub in jex_core.jaxprs_in_params(eqn.params):
        walk(sub)

  q = jnp.ones((1, 40, 2, 8), jnp.float32)
  loss = lambda q: jnp.sum(dot_product_attention(  # noqa: E731
      q, q, q, normalizer=name, implementation="pallas", chunk_size=BLOCK,
      **kw))
  walk(jax.make_jaxpr(jax.grad(loss))(q).jaxpr)
  return found


def test_only_the_weighted_pass_takes_a_table():
  """The threshold stream's weighted pass (forward, dQ, dK/dV) takes the
  table; its search passes and every other normalizer's kernels do not
  (their programs are as before the skip: compared by lowering, see
  benchmarks/README.md)."""
  assert pallas.wrapper.target_platform() != "tpu"
  found = _prefetching_kernels("sparsemax", is_causal=True)
  # interpret=None lowers each kernel twice (platform_dependent): Mosaic's
  # and the interpreter's; the differentiable step's two row-sum passes are
  # forward kernels without a table.
  assert sorted(found["softattn_forward"]) == [0, 0, 0, 0, 1, 1], found
  for kernel in ("softattn_dq", "softattn_dkv"):
    assert set(found[kernel]) == {0, 1}, found
  assert set(found["softattn_threshold_stats"]) == {0}, found
  for name in ("softmax", "sigmoid", "normsoftmax", "stick_breaking"):
    assert {n for calls in _prefetching_kernels(name).values()
            for n in calls} == {0}, name


def test_no_table_past_the_smem_budget(monkeypatch):
  """SMEM (1 MiB on v4 and v5e) holds a prefetched table whole: past
  ``SKIP_TABLE_BYTES`` the weighted pass computes every tile, no table."""
  # int32 per batch element (one), head block (both heads: hp = 2 at
  # D = 8) and tile (40 rows in blocks of 16: 3 x 3).
  size = 4 * 1 * 1 * 9
  monkeypatch.setattr(pallas.wrapper, "SKIP_TABLE_BYTES", size - 1)
  found = _prefetching_kernels("sparsemax", is_causal=True)
  assert {n for calls in found.values() for n in calls} == {0}, found
  monkeypatch.setattr(pallas.wrapper, "SKIP_TABLE_BYTES", size)
  found = _prefetching_kernels("sparsemax", is_causal=True)
  assert sorted(found["softattn_forward"]) == [0, 0, 0, 0, 1, 1], found


def test_the_kernels_skip_what_the_table_marks_dead():
  """With every tile marked dead the weighted pass's forward, dQ and dK/dV
  kernels compute nothing: output and gradients are exactly 0 (a loss
  linear in the output, so dO is not 0), where the true table gives them."""
  q, k, v, mask = _inputs("key_mask")
  c = np.random.default_rng(1).standard_normal((B, q.shape[1], H, D))

  def loss(q, k, v):
    out = dot_product_attention(q, k, v, normalizer="sparsemax", mask=mask,
                                **_kw("key_mask", "pallas"))
    return jnp.sum(c * out), out

  def run():  # one program for the output and the gradients
    fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))
    (_, out), grads = fn(q, k, v)
    return [np.asarray(x) for x in (out, *grads)]

  assert all(np.any(x != 0) for x in run())
  with _patched(streams, "live_tiles",
                lambda f: lambda *a: jnp.zeros_like(f(*a))):
    dead = run()
  for label, x in zip(["out", "dq", "dk", "dv"], dead):
    assert not np.any(x), label


@pytest.mark.parametrize("segment", [8, 16, 32, 64])
def test_the_stats_pass_writes_block_maxima_of_other_blocks(segment):
  """The stats pass's own key blocks (16 here) need not be the weighted
  pass's (``segment``): on a TPU the stats pass, with one value column,
  often takes smaller ones. A tile holding several segments (8), one
  (16), a part of one (32), or the whole ragged row in one (64 > Lk):
  each row's max of ``z = (alpha - 1) s`` over each segment's valid keys,
  ``NEG`` where it has none."""
  lq, lk, _, _ = CASES["key_mask"]
  q, k, _, mask = _inputs("key_mask")
  entmax = N.get("entmax15")
  out = pallas.pallas_attention(
      jnp.asarray(q), jnp.asarray(k), jnp.zeros((B, lq, H, 1)), entmax,
      entmax.resolve(None, head_dim=D), jnp.asarray(mask), D ** -0.5, False,
      chunk_size=BLOCK, interpret=True, round_operands=False,
      sums=streams.Sums(1.5, "stats", segment))
  z = 0.5 * np.einsum("bqhd,bkhd->bqhk", q, k) * D ** -0.5
  z = np.where(mask[:, 0, 0][:, None, None, :], z, NEG)
  n = -(-lk // segment)
  z = np.pad(z, ((0, 0), (0, 0), (0, 0), (0, n * segment - lk)),
             constant_values=NEG)
  want = z.reshape(B, lq, H, n, segment).max(-1)
  assert out.shape == (B, lq, H, 3 + n)
  np.testing.assert_allclose(out[..., 3:], want, rtol=1e-5, atol=1e-6)
