"""A one-off check that the Mosaic GPU kernels compute a call's kind right
on the GPU in hand, which ``auto`` runs before they replace the Triton
kernels there (``backend.choose``).

Why a check at all: the Mosaic GPU kernels were written and tested in
Mosaic GPU's interpreter on CPU (no GPU was lent to the sessions that wrote
them), and a ``wgmma``/TMA kernel can lower and still compute the wrong
thing on a chip (the Triton kernels did once, at head dim 8: docs/kernels.md).
Issue #46 asks that ``implementation="pallas"`` and ``auto`` take them
where they lower; this takes them where they lower *and* agree with dense on
the device itself, and keeps the Triton kernels, with a warning naming why,
where they do not. Once ``tests/test_pallas_mosaic_gpu.py`` has passed on a
Hopper GPU, ``backend.MOSAIC_VALIDATED`` skips the check.

What is checked (``failure``), per ``Kind`` and device, once per process:
the output and the q/k/v (and array parameter) gradients of
``sum(cos(out))`` from the Mosaic GPU kernels against dense on two small
problems that stream several blocks (``CASES``: a key mask with a fully
masked batch element at cross-attention lengths, and causal; lengths not
multiples of the 64-row blocks), with the call's normalizer, parameters'
form, head dims, dtype, blocks and soft cap. The bound is the test suite's
for bfloat16/float16 (``tests/test_pallas_mosaic_gpu.py``, which the Triton
kernels met on an H200): the kernels' error against dense in float32 at
most twice (``BOUND``; ``GRAD_FACTOR`` for gradients where that is not the
right multiple) dense's own error in the call's dtype, plus one rounding
unit of each array's scale (float32 calls: ``F32_TOL`` of the scale against
dense float32). A kernel bug (a dropped block, a wrong mask or layout) is
off by far more. Costs one compile of the kernels' forward and backward
and of dense per kind (not timed on a GPU; 4-9 s a kind interpreted on 2
CPU cores).

The check runs while the caller's step is traced, in a thread of its own
(eagerly, on the default device, outside the caller's jit, mesh and
precision contexts). Its inputs are fixed, so every process of a multi-host job reaches the same
verdict on the same hardware. Array parameters that are traced in the
caller (a learnable sink) are checked at the normalizer's default (else
0.5), varied across heads so their per-row columns are exercised.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from softattn.dense import dense_attention
from softattn.pallas.common import prepare

# (q_len, k_len, key mask?, causal?): two query and three key blocks of 64.
CASES = ((72, 136, True, False), (100, 100, False, True))
B, H = 2, 2
BOUND = 2.0
# sin_max breaks down (Wang et al. 2021): its row sum of sin(s) crosses 0,
# so low-precision gradients are off by 16-170 % of their scale on either
# path; fused was measured at <= 2.4x dense (tests/test_pallas.py).
GRAD_FACTOR = {"sin_max": 4.0}
F32_TOL = 1e-4


class Kind(NamedTuple):
  """What changes the kernels' program (hashable): the normalizer (its
  name and resolved static parameters), its array parameters' names, head
  dims, dtype, forced blocks ``(bk, bq)`` and soft cap."""
  name: str
  static: tuple
  arrays: tuple[str, ...]
  d: int
  dv: int
  dtype: str
  blocks: tuple
  cap: float | None


def kind_of(norm, p, d, dv, blocks, dtype, cap) -> Kind:
  """The call's ``Kind``; ``p``: its resolved parameters, where arrays
  (concrete or traced) are the kernels' row columns
  (``prepare.is_row_param``)."""
  p = p or {}
  arrays = tuple(sorted(n for n, x in p.items() if prepare.is_row_param(x)))
  static = tuple(sorted((n, x) for n, x in p.items() if n not in arrays))
  return Kind(norm.name, static, arrays, int(d), int(dv or d),
              jnp.dtype(dtype).name, tuple(blocks or (None, None)), cap)


def _params(norm, kind: Kind):
  """The resolved parameters the check runs with: the static ones, and each
  array one per head (``[H, 1, 1]``) around its default."""
  p = dict(kind.static)
  ramp = np.linspace(-0.1, 0.1, H, dtype=np.float32).reshape(H, 1, 1)
  for i, name in enumerate(kind.arrays):
    base = norm.defaults.get(name)
    base = float(base) if isinstance(base, (int, float)) else 0.5
    p[name] = base + (1 + i) * (ramp if base == 0 else abs(base) * ramp)
  return p


def _inputs(lq, lk, d, dv, dtype):
  ks = jax.random.split(jax.random.PRNGKey(0), 4)
  q = jax.random.normal(ks[0], (B, lq, H, d))
  k = jax.random.normal(ks[1], (B, lk, H, d))
  v = jax.random.normal(ks[2], (B, lk, H, dv))
  mask = jax.random.bernoulli(ks[3], 0.7, (B, 1, 1, lk)).at[1].set(False)
  # Representable in the call's dtype, so every run sees the same numbers.
  return tuple(x.astype(dtype).astype(jnp.float32) for x in (q, k, v)) + (
      mask,)


def _grads(attend, q, k, v, p, dtype):
  """``[out, dq, dk, dv, d<array param> ...]`` float32 NumPy arrays of
  ``sum(cos(out))``, ``out = attend(q, k, v, p)`` with q, k, v in
  ``dtype``."""
  arrays = {n: jnp.asarray(x) for n, x in p.items()
            if isinstance(x, np.ndarray)}
  static = {n: x for n, x in p.items() if n not in arrays}

  def loss(q, k, v, arrays):
    out = attend(q, k, v, {**static, **arrays})
    return jnp.sum(jnp.cos(out.astype(jnp.float32))), out

  fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))
  (_, out), grads = fn(*(x.astype(dtype) for x in (q, k, v)), arrays)
  flat = [out] + list(grads[:3]) + [grads[3][n] for n in sorted(arrays)]
  return [np.asarray(x, np.float32) for x in flat]


def compare(norm, kind: Kind, mosaic_attend, interpret=None) -> str | None:
  """None if ``mosaic_attend`` agrees with dense on ``CASES`` within the
  module's bound, else what differed (one line). ``mosaic_attend(q, k, v,
  norm, p, mask, scale, causal, bk, bq, interpret, cap)``: the kernels'
  entry (``mosaic.wrapper.gpu_attention`` with ``local=True``)."""
  p = _params(norm, kind)
  scale = 1.0 / float(np.sqrt(kind.d))
  dtype = jnp.dtype(kind.dtype)
  for lq, lk, masked, causal in CASES:
    q, k, v, mask = _inputs(lq, lk, kind.d, kind.dv, dtype)
    mask = mask if masked else None

    def dense(q, k, v, pp, mask=mask, causal=causal):
      return dense_attention(q, k, v, norm, norm.resolve(pp), mask, None,
                             scale, causal, kind.cap)[0]

    def fused(q, k, v, pp, mask=mask, causal=causal):
      return mosaic_attend(q, k, v, norm, norm.resolve(pp), mask, scale,
                           causal, *kind.blocks, interpret, kind.cap)

    # float32 at full precision: XLA:GPU's default float32 dot is TF32,
    # whose rounding (2^-11) is float16's own.
    with jax.default_matmul_precision("highest"):
      truth = _grads(dense, q, k, v, p, jnp.float32)
    got = _grads(fused, q, k, v, p, dtype)
    ref = truth if dtype == jnp.float32 else _grads(dense, q, k, v, p, dtype)
    unit = float(jnp.finfo(dtype).eps) / 2   # bf16: 2^-8, f16: 2^-11
    labels = ["out", "dq", "dk", "dv"] + [f"d{n}" for n in kind.arrays]
    for label, t, r, g in zip(labels, truth, ref, got):
      scale_t = 1.0 + float(np.max(np.abs(t)))
      err = float(np.max(np.abs(t - g))) if np.all(np.isfinite(g)) else np.inf
      factor = BOUND if label == "out" else GRAD_FACTOR.get(kind.name, BOUND)
      bound = (F32_TOL * scale_t if dtype == jnp.float32 else
               factor * float(np.max(np.abs(t - r))) + unit * scale_t)
      if not err <= bound:
        return (f"{label} off by {err:.3g} (bound {bound:.3g}) at "
                f"q_len={lq}, k_len={lk}, {'causal' if causal else 'key mask'}")
  return None


# (kind, device kind, interpret) -> failure's verdict, for this process.
VERDICTS: dict[tuple, str | None] = {}


def failure(norm, kind: Kind, device_kind: str, interpret=None) -> str | None:
  """Why the Mosaic GPU kernels are not taken for ``kind`` on this device
  (None: they agree with dense), checked once per (kind, device kind) in a
  process (``VERDICTS``). Lowering, compile and run errors are reasons too:
  the alternative is the Triton kernels, not a failed step."""
  key = (kind, device_kind, interpret)
  if key not in VERDICTS:
    VERDICTS[key] = _check(norm, kind, device_kind, interpret)
  return VERDICTS[key]


def _check(norm, kind, device_kind, interpret):
  from softattn.pallas.gpu.mosaic import wrapper  # noqa: PLC0415
  attend = functools.partial(wrapper.gpu_attention, local=True)

  def run():
    try:
      return compare(norm, kind, lambda *a: attend(*a[:11],
                                                   logits_soft_cap=a[11]),
                     interpret)
    except Exception as e:  # noqa: BLE001  (any failure means: keep Triton)
      return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

  # A thread of its own: jax's trace and config contexts are per thread, so
  # the check runs eagerly on the default device, outside the caller's jit,
  # mesh and precision contexts (``ensure_compile_time_eval`` is not enough:
  # the interpreted kernels' named axes are then unbound).
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    why = pool.submit(run).result()
  if why:
    logging.warning(
        "softattn: the Mosaic GPU kernels failed their check on %s for %s "
        "(%s); running the Triton kernels instead. SOFTATTN_GPU_KERNELS="
        "triton skips the check; please report this.", device_kind,
        kind.name, why)
  else:
    logging.info("softattn: the Mosaic GPU kernels agree with dense on %s "
                 "for %s; running them.", device_kind, kind)
  return why
