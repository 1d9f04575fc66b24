"""``implementation="pallas"`` in the Pallas interpreter equals the dense path.

Outputs and the gradients of q, k, v (and of array parameters) for every
normalizer the kernels fuse, under a key mask (with a fully masked batch
element and cross-attention lengths) and a causal mask, both at lengths that
are not multiples of the block size, in float32 and bfloat16: every
kernel under both masks in float32 and under one in bfloat16, every
normalizer in at least one combination (``_matrix``). Shapes are tiny
and blocks are 16 so that every kernel streams several query and key blocks:
the interpreter compiles each case for the CPU (~1 s), which dominates.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn import dot_product_attention, pallas, topology
from softattn import normalizers as N
from softattn.nn import MultiHeadAttention

B, H, D = 2, 2, 8
BLOCK = 16

# Every normalizer whose mode the kernels fuse, with array parameters where a
# layer would learn them (per head: [H, 1, 1]), so their cotangents are tested.
PARAMS = {
    "normsoftmax_learnable": {"w": np.float32(1.3) * np.ones((), np.float32)},
    "ssmax": {"s_scale": np.array([0.4, 0.7], np.float32).reshape(H, 1, 1)},
    "nap": {"g": np.array([1.0, 0.5], np.float32).reshape(H, 1, 1),
            "b": np.array([0.1, -0.2], np.float32).reshape(H, 1, 1)},
    "consmax": {"beta": np.array([0.5, -0.5], np.float32).reshape(H, 1, 1),
                "denom": np.array([3.0, 8.0], np.float32).reshape(H, 1, 1)},
    "lssar": {"power": np.float32(3.0) * np.ones((), np.float32)},
    # gpt-oss's learnable sink per head, read by the kernels as a row column;
    # its cotangent comes from the saved row statistics (modes.scalar_grad).
    "softmax_sink": {"sink": np.array([0.3, -1.5], np.float32).reshape(H, 1,
                                                                        1)},
}
# softmax_sink as an array above, and as a compiled-in number below.
FUSED = [n for n in N.names() if n != "prenorm"
         and pallas.unsupported_reason(N.get(n)) is None] + [
    "prenorm(sin2_max_shifted)", "relu_seqlen(act=gelu, alpha=0.5)",
    "prenorm(entmax15)", "softmax_sink(sink=0.7)", "prenorm(stick_breaking)"]

# Gradient bound, as a multiple of dense bf16's own error, where 2x is not
# the right one. sin_max breaks down (Wang et al. 2021): its row sum of
# sin(s) crosses 0, so bf16 gradients are off by 16-170 % of their scale on
# *either* path (the rounding of q.k and V is amplified by 1/Z); both errors
# are that conditioning, and the fused one was measured at <= 2.4x dense.
BF16_GRAD_FACTOR = {"sin_max": 4.0}
# f32 bound relative to each array's scale. sin_max's row sum of sin(s)
# crosses 0, so its weights reach ~1e3 and the gradients ~1e4 (the paper's
# "breaks down"): an f32 reordering moves them by ~1e-7 x that condition
# number, whichever path computes them.
F32_TOL = {"sin_max": 1e-3}
# (q_len, k_len, key mask?, causal?)
CASES = {"key_mask": (24, 40, True, False), "causal": (40, 40, False, True)}


def _kernel(name):
  """What the fused kernels compile differently between normalizers: the
  mode, the row statistics they need (a stats pass for moments, key counts),
  a compiled-in exp bound, array parameters (their cotangent paths) and the
  row stream (threshold search or stick-breaking scans). The rest of a
  normalizer is an elementwise transform traced into the same code."""
  n = N.get(name)
  stream = None if n.stream is None else (n.stream.alpha is None,
                                          n.stream.passes)
  return (n.mode, n.needs, n.exp_upper is not None, name in PARAMS, stream)


# The (dtype, mask case) combinations a kernel is checked in.
COMBOS = [(dtype, case) for dtype in ("f32", "bf16") for case in sorted(CASES)]


def _matrix():
  """(normalizer, dtype, case) triples: the first normalizer of each kernel
  (``_kernel``) in f32 under both masks and in bf16 under one (the kernels
  take the two in turn), each other normalizer in one combination, taking
  the four in turn. A kernel's masking is its own, so every kernel is
  checked under a key mask and causally; its rounding is its own but the
  same under either mask (the mask only selects entries), so each kernel's
  bf16 runs once; every normalizer's transform is checked once. 74 compiled
  cases instead of the full product's 144 (these cases are the suite's
  largest cost)."""
  seen, triples, turn = set(), [], 0
  cases = sorted(CASES)
  for name in FUSED:
    kernel = _kernel(name)
    if kernel in seen:
      triples.append((name, *COMBOS[turn % len(COMBOS)]))
      turn += 1
    else:
      triples += [(name, "f32", case) for case in cases] + [
          (name, "bf16", cases[len(seen) % len(cases)])]
      seen.add(kernel)
  return triples


F32_MATRIX, BF16_MATRIX = ([(n, c) for n, d, c in _matrix() if d == dtype]
                           for dtype in ("f32", "bf16"))


@functools.lru_cache(maxsize=None)
def _inputs_np(lq, lk, d):
  # Drawn with x64 off whatever the caller's setting: under jax.enable_x64
  # jax.random draws other numbers (float64 bits), and the float64 truth was
  # then computed on other inputs than the runs it judged, its error as large
  # as the outputs, so check_f32's 2x-dense-f32 bound let anything through
  # (found by benchmarks/mutations.py: a kernel that dropped the causal
  # diagonal passed).
  with jax.enable_x64(False):
    ks = jax.random.split(jax.random.PRNGKey(1), 4)
    # bf16-representable values, so f32 and bf16 runs see the same numbers.
    rnd = lambda kk, l: jax.random.normal(kk, (B, l, H, d)).astype(  # noqa: E731
        jnp.bfloat16).astype(jnp.float32)
    mask = jax.random.bernoulli(ks[3], 0.7, (B, 1, 1, lk))
    mask = mask.at[1].set(False)  # batch element 1: every key masked
    return tuple(np.asarray(x) for x in (rnd(ks[0], lq), rnd(ks[1], lk),
                                         rnd(ks[2], lk), mask))


def _inputs(lq, lk, d=D):
  return tuple(jnp.asarray(x) for x in _inputs_np(lq, lk, d))


def _run(impl, name, case, dtype, d=D):
  """Output and gradients of ``sum(cos(out))`` w.r.t. q, k, v, params, at
  head dim ``d``."""
  lq, lk, use_mask, causal = CASES[case]
  q, k, v, mask = _inputs(lq, lk, d)
  q, k, v = (x.astype(dtype) for x in (q, k, v))
  kw = dict(mask=mask if use_mask else None, is_causal=causal,
            implementation=impl)
  if impl == "pallas":
    kw["chunk_size"] = BLOCK
  return grads_of(q, k, v, name, **kw)


def grads_of(q, k, v, name, **kw):
  """``[out, dq, dk, dv, d<param> ...]`` (float32 NumPy) of
  ``sum(cos(out))``, ``out = dot_product_attention(q, k, v,
  normalizer=name, **kw)`` with ``PARAMS[name]`` as arrays."""
  params = {k_: jnp.asarray(v_) for k_, v_ in PARAMS.get(name, {}).items()}
  kw = dict(kw, normalizer=name)

  def loss(q, k, v, params):
    out = dot_product_attention(q, k, v, normalizer_params=params, **kw)
    return jnp.sum(jnp.cos(out.astype(jnp.float32))), out

  fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))
  (_, out), grads = fn(q, k, v, params)
  flat = [out] + list(grads[:3]) + [grads[3][k_] for k_ in sorted(params)]
  return [np.asarray(x, np.float32) for x in flat]


@functools.lru_cache(maxsize=None)
def _dense_f32(name, case, d=D):
  return _run("dense", name, case, jnp.float32, d)


def _err(a, b):
  return float(np.max(np.abs(a - b)))


@functools.lru_cache(maxsize=None)
def _dense_f64(name, case, d=D):
  with jax.enable_x64(True):
    return _run("dense", name, case, jnp.float64, d)


def check_f32(name, case, got, dim=D):
  """The fused f32 result ``got`` against dense in float64 (the truth):
  within a few ulps of each array's scale, or, where the normalizer's
  conditioning amplifies rounding past that (sin_max's row sum crosses 0),
  at most 2x dense f32's own error. Judged against f64, not dense f32: the
  two f32 paths round in different places (the dense path scales q before
  the score matmul, the kernels scale the scores), and on an ill-conditioned
  row either one is as far from the other as from the truth."""
  truth, dense = _dense_f64(name, case, dim), _dense_f32(name, case, dim)
  for label, t, d, g in zip(["out", "dq", "dk", "dv", "dparams"], truth,
                            dense, got):
    assert np.all(np.isfinite(g)), label
    # Same f32 math summed in another order (blocks of 16, online
    # rescaling): a few ulps of the largest term. NAP and the periodic
    # ratios are not normalised, so their outputs and gradients reach
    # O(10-100): the bound is relative to each array's own scale.
    scale = 1.0 + float(np.max(np.abs(t)))
    tol = F32_TOL.get(name, 2e-5)
    assert _err(t, g) <= max(tol * scale, 2 * _err(t, d)), (
        label, _err(t, g), _err(t, d), scale)


def test_the_case_matrix_covers_every_normalizer_and_kernel():
  triples = _matrix()
  assert {n for n, _, _ in triples} == set(FUSED)
  firsts = {}
  for n, _, _ in triples:
    firsts.setdefault(_kernel(n), n)
  for kernel, first in firsts.items():
    combos = {(d, c) for n, d, c in triples if n == first}
    # Both masks in f32, bf16 once, for every kernel.
    assert {c for d, c in combos if d == "f32"} == set(CASES), kernel
    assert len([c for d, c in combos if d == "bf16"]) == 1, kernel
  # bf16 meets both masks over the kernels, and the others take all four
  # combinations in turn, so no one combination is left to a few kernels.
  assert {c for n, d, c in triples if d == "bf16" and firsts[_kernel(n)] == n
          } == set(CASES)
  others = [(d, c) for n, d, c in triples if firsts[_kernel(n)] != n]
  assert set(others) == set(COMBOS) and len(triples) == 3 * len(firsts) + len(
      others)


@pytest.mark.parametrize("name,case", F32_MATRIX)
def test_pallas_f32_equals_dense(name, case):
  check_f32(name, case, _run("pallas", name, case, jnp.float32))


@pytest.mark.parametrize("name,case", BF16_MATRIX)
def test_pallas_bf16_as_accurate_as_dense(name, case):
  """In bf16 both paths round (scores are f32, weights meet V in bf16), in
  different places: each is compared with the f32 result on the same inputs,
  and the fused kernel must not be less accurate than dense bf16 by more than
  2x plus one bf16 ulp (2^-8) of the array's scale."""
  truth = _dense_f32(name, case)
  dense = _run("dense", name, case, jnp.bfloat16)
  got = _run("pallas", name, case, jnp.bfloat16)
  for label, t, d, g in zip(["out", "dq", "dk", "dv", "dparams"], truth,
                            dense, got):
    assert np.all(np.isfinite(g)), label
    scale = 1.0 + float(np.max(np.abs(t)))
    factor = 2.0 if label == "out" else BF16_GRAD_FACTOR.get(name, 2.0)
    assert _err(t, g) <= factor * _err(t, d) + 2**-8 * scale, (
        label, _err(t, g), _err(t, d), scale)


def test_pallas_rejects_row_normalizers_without_a_stream():
  # Every registered rowwise normalizer streams (and fuses) now; one that
  # declares no stream is still refused with the alternatives named.
  norm = dataclasses.replace(N.get("stick_breaking"), name="ordered",
                             stream=None)
  q = jnp.zeros((1, 8, 1, 8))
  with pytest.raises(ValueError, match="whole sorted or ordered score row"
                     ".*implementation='chunked'.*implementation='dense'"):
    dot_product_attention(q, q, q, normalizer=norm, implementation="pallas")


def test_pallas_rejects_bias_and_query_masks():
  q = jnp.zeros((1, 8, 1, 8))
  with pytest.raises(ValueError, match="no additive bias"):
    dot_product_attention(q, q, q, bias=jnp.zeros((8, 8)),
                          implementation="pallas")
  with pytest.raises(ValueError, match="not a per-query mask"):
    dot_product_attention(q, q, q, mask=jnp.ones((8, 8), bool),
                          implementation="pallas")


def test_auto_never_picks_pallas_off_tpu(monkeypatch):
  from softattn import attention  # noqa: PLC0415
  norm = N.get("softmax")
  shape = (1, 1, 4096, 4096)
  assert jax.default_backend() != "tpu"
  assert attention._auto(norm, shape, 64, None, None, False, False) == "chunked"
  # On a TPU (as the device kind reports it) it picks the fused kernels for
  # what they support, and nothing else.
  monkeypatch.setattr(pallas, "target_chip", lambda: ("v5e", True))
  assert attention._auto(norm, shape, 64, None, None, False, False) == "pallas"
  # sparsemax (passes) and stick_breaking (scans) fuse, but auto does not
  # pick them (crossover not measured).
  for name in ("sparsemax", "stick_breaking"):
    assert attention._auto(N.get(name), shape, 64, None, None, False,
                           False) == "chunked", name
  assert attention._auto(norm, shape, 64, None, jnp.zeros(shape), False,
                         False) == "chunked"
  # The measured crossover: dense up to one 128 x 128 tile of scores (the
  # quickstart's 49 tokens), fused from there (ViT-B/16's 196).
  for length, impl in ((49, "dense"), (128, "dense"), (196, "pallas")):
    assert attention._auto(norm, (1, 1, length, length), 64, None, None,
                           False, False) == impl, length


@pytest.mark.parametrize("name,param", [("ssmax", "s_scale"),
                                        ("softmax_sink", "sink")])
def test_multihead_attention_uses_pallas_when_asked(name, param):
  """The layer's learnable per-head parameter (ssmax's scale, gpt-oss's
  sink) trains through the kernel: its gradient equals the dense path's."""
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 20, 16))
  mask = jnp.arange(20)[None, None, None, :] < jnp.array([20, 13])[:, None,
                                                                   None, None]
  layers = {impl: MultiHeadAttention(num_heads=2, normalizer=name,
                                     implementation=impl, chunk_size=BLOCK)
            for impl in ("dense", "pallas")}
  params = layers["dense"].init(jax.random.PRNGKey(1), x, mask=mask)
  assert params["params"][f"norm_{param}"].shape == (2, 1, 1)
  # A sink of 0 would weigh little against 20 keys: move it where its
  # gradient is large (and differs per head).
  params["params"][f"norm_{param}"] = jnp.array([1.5, 3.0]).reshape(2, 1, 1)

  def loss(p, impl):
    return jnp.sum(jnp.sin(layers[impl].apply(p, x, mask=mask)))

  ref = jax.jit(jax.value_and_grad(lambda p: loss(p, "dense")))(params)
  got = jax.jit(jax.value_and_grad(lambda p: loss(p, "pallas")))(params)
  np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
  # f32 both, summed in another order; some gradients are 0 analytically
  # (key-projection bias under a normalised softmax), so the bound is
  # relative to each array's scale, as in test_pallas_f32_equals_dense.
  for a, b in zip(jax.tree.leaves(got[1]), jax.tree.leaves(ref[1])):
    assert _err(np.asarray(a), np.asarray(b)) <= 2e-5 * (
        1.0 + float(np.max(np.abs(b))))


def test_shard_map_under_a_mesh_equals_unsharded():
  """With a mesh set, the kernels run per (batch, head) shard in shard_map
  (here a 1x1 mesh on the CPU device: the wrapping itself is what's tested;
  the TPU AOT tests compile it over 4 devices)."""
  q, k, v, mask = _inputs(24, 40)
  f = jax.jit(lambda q, k, v: dot_product_attention(
      q, k, v, normalizer="sigmoid", mask=mask, implementation="pallas",
      chunk_size=BLOCK))
  ref = f(q, k, v)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1),
                           ("data", "model"))
  with jax.set_mesh(mesh):
    got = jax.jit(lambda q, k, v: dot_product_attention(
        q, k, v, normalizer="sigmoid", mask=mask, implementation="pallas",
        chunk_size=BLOCK))(q, k, v)
    assert "shard_map" in str(jax.make_jaxpr(lambda q: dot_product_attention(
        q, k, v, normalizer="sigmoid", implementation="pallas",
        chunk_size=BLOCK))(q))
  np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_block_rule_fits_each_chip():
  """The written rule: blocks fit half the VMEM limit, bk is a multiple of
  the MXU width, and blocks shrink to short sequences."""
  for name, c in topology.CHIPS.items():
    for d in (64, 128, 256):
      bq, bk = pallas.block_sizes(4096, 4096, d, d, jnp.bfloat16, name)
      assert bk % c.mxu_width == 0
      for kernel in ("forward", "backward"):
        assert pallas.footprint(kernel, bq, bk, d, d, 2) <= pallas.budget(name)
  # The generation of a device kind; off TPU the rule runs for the default.
  assert pallas.tpu.blocks.chip_of_kind("TPU v6 lite") == "v6e"
  assert pallas.tpu.blocks.chip_of_kind("cpu") == pallas.tpu.blocks.DEFAULT_CHIP
  # v4's 16 MiB VMEM takes smaller blocks than v5e's 128 MiB.
  assert (np.prod(pallas.block_sizes(4096, 4096, 128, 128, jnp.bfloat16, "v4"))
          < np.prod(pallas.block_sizes(4096, 4096, 128, 128, jnp.bfloat16,
                                       "v5e")))
  # A sequence shorter than a block is one block of its own length: no
  # padding (ViT-B/16's 197 tokens were padded to 208 x 256 before).
  assert pallas.block_sizes(197, 197, 64, 64, jnp.float32, "v5e") == (197, 197)
  assert pallas.block_sizes(4096, 197, 64, 64, jnp.float32, "v5e")[1] == 197
  # Two heads of 64 make a 128-lane block; 128-wide heads go one at a time;
  # widths no head count makes whole take the whole H*D dimension.
  assert pallas.common.tile.heads_per_block(12, 64, 64) == 2
  assert pallas.common.tile.heads_per_block(12, 128, 128) == 1
  assert pallas.common.tile.heads_per_block(4, 32, 32) == 4
  assert pallas.common.tile.heads_per_block(2, 8, 8) == 2


@pytest.mark.parametrize("name", ["softmax", "stick_breaking"])
@pytest.mark.parametrize("hp", [1, 2])
def test_heads_per_block_and_per_head_masks_equal_dense(monkeypatch, hp, name):
  """One head per block or two (the D=64 layout), a key mask that differs
  per head, ragged lengths: outputs and gradients equal the dense path
  (stick-breaking: its own kernels and per-block carries, ``stick.py``)."""
  monkeypatch.setattr(pallas.common.tile, "heads_per_block", lambda h, d, dv: hp)
  q, k, v, _ = _inputs(24, 40)
  mask = jax.random.bernoulli(jax.random.PRNGKey(7), 0.6, (B, H, 1, 40))

  def loss(impl, q, k, v):
    kw = dict(chunk_size=BLOCK) if impl == "pallas" else {}
    out = dot_product_attention(q, k, v, normalizer=name, mask=mask,
                                implementation=impl, **kw)
    return jnp.sum(jnp.cos(out)), out

  results = {}
  for impl in ("dense", "pallas"):
    fn = jax.jit(jax.value_and_grad(functools.partial(loss, impl),
                                    argnums=(0, 1, 2), has_aux=True))
    (_, out), grads = fn(q, k, v)
    results[impl] = [out, *grads]
  for a, b in zip(results["pallas"], results["dense"]):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def test_kernels_read_the_callers_layout_without_copies():
  """No transpose, pad or concatenate of q/k/v around the kernels: the
  [B, L, H, D] arrays are reshaped (free) to [B, L, H*D] and read through
  the BlockSpecs; the backward saves them as they are."""
  q, k, v, mask = _inputs(24, 40)
  f = lambda q, k, v: jnp.sum(dot_product_attention(  # noqa: E731
      q, k, v, normalizer="softmax", mask=mask, implementation="pallas",
      chunk_size=BLOCK) ** 2)
  jaxpr = str(jax.make_jaxpr(jax.grad(f, argnums=(0, 1, 2)))(q, k, v))
  # (The old wrapper transposed to [B, H, L, D] and padded to whole blocks:
  # eight rank-4 transposes and pads in this program.)
  moved = re.findall(r":\w+\[(\d+,\d+,\d+,\d+)\] = (transpose|pad)\[", jaxpr)
  assert not moved, moved
  assert "pallas_call" in jaxpr


def test_an_array_epsilon_is_refused_by_the_fused_kernels():
  """A mode's scalar as an array needs its cotangent: exp_sink derives it
  (a learnable sink, tested above), the epsilons of ratio/softpick do not."""
  q, k, v, _ = _inputs(24, 40)
  eps = jnp.full((H, 1, 1), 1e-6)
  with pytest.raises(ValueError, match="take 'eps' as a number, not an array"):
    dot_product_attention(q, k, v, normalizer="softpick",
                          normalizer_params={"eps": eps},
                          implementation="pallas")
  for sink in (0.5, jnp.zeros((H, 1, 1))):
    assert pallas.unsupported_reason(N.get("softmax_sink"), None, None,
                                     {"sink": sink}) is None


def test_operand_dtype_rounds_float32_on_tpu_at_default_precision():
  rule = pallas.wrapper.operand_dtype
  assert rule(jnp.float32, "tpu") == jnp.bfloat16
  for dtype, platform in ((jnp.float32, "cpu"), (jnp.float32, "gpu"),
                          (jnp.bfloat16, "tpu"), (jnp.float16, "tpu")):
    assert rule(dtype, platform) == dtype, (dtype, platform)
  for precision in ("float32", "highest", "tensorfloat32"):
    with jax.default_matmul_precision(precision):
      assert rule(jnp.float32, "tpu") == jnp.float32, precision


def test_float32_on_tpu_runs_the_kernels_in_bfloat16(monkeypatch):
  """As lowered for a TPU (the platform rule patched; the kernels run in the
  interpreter here): float32 q, k, v enter every kernel as bfloat16, the
  output and gradients come back as float32, and against the float64 truth
  on the unrounded inputs they are as accurate as the dense path run in
  bfloat16. Under a float32 matmul precision the kernels see no bfloat16."""
  monkeypatch.setattr(pallas.wrapper, "target_platform", lambda: "tpu")
  lq, lk, _, _ = CASES["key_mask"]
  ks = jax.random.split(jax.random.PRNGKey(3), 3)
  q, k, v = (jax.random.normal(kk, (B, l, H, D)) for kk, l in
             zip(ks, (lq, lk, lk)))

  def loss(impl, dtype, q, k, v):
    kw = dict(chunk_size=BLOCK) if impl == "pallas" else {}
    out = dot_product_attention(*(x.astype(dtype) for x in (q, k, v)),
                                normalizer="softmax", implementation=impl,
                                **kw).astype(q.dtype)
    return jnp.sum(jnp.cos(out)), out

  # Jitted: eagerly, the interpreter dispatched every kernel op one by one
  # (~40 s). The patched platform is read when it traces.
  @functools.partial(jax.jit, static_argnums=(0, 1))
  def run(impl, dtype, *args):
    (_, out), grads = jax.value_and_grad(
        functools.partial(loss, impl, dtype), argnums=(0, 1, 2),
        has_aux=True)(*args)
    return [out, *grads]

  jaxpr = str(jax.make_jaxpr(lambda *a: run("pallas", jnp.float32, *a))(
      q, k, v))
  got = run("pallas", jnp.float32, q, k, v)
  assert all(x.dtype == jnp.float32 for x in got)
  with jax.enable_x64(True):
    truth = run("dense", jnp.float64, *(x.astype(jnp.float64)
                                        for x in (q, k, v)))
  dense = run("dense", jnp.bfloat16, q, k, v)
  for label, t, d, g in zip(["out", "dq", "dk", "dv"], truth, dense, got):
    t, d, g = (np.asarray(x, np.float64) for x in (t, d, g))
    assert _err(t, g) <= 1.5 * _err(t, d), (label, _err(t, g), _err(t, d))
  # Without the rounding the kernels read float32.
  with jax.default_matmul_precision("float32"):
    plain = str(jax.make_jaxpr(lambda *a: run("pallas", jnp.float32, *a))(
        q, k, v))
  assert "bf16[" in jaxpr and "bf16[" not in plain
